"""How fast and how exactly the rest of a verl deployment is paged (issue 33).

    python benchmarks/deployment_pages.py [--json] [--skip-wall]

1. Rollout-server stall, on wall time: ``verl-monitor run --config`` (a real daemon process) with a file_sd
   file listing three vLLM stand-ins on loopback (their exposition rendered from vLLM's own metric
   definitions, tests/fixtures/vllm-v1-metrics.prom): one stalls 30 s in (requests held, tokens flat), one
   keeps generating, one is idle; a fourth is written into the file 30 s in and stalls at 60 s.
   ``stall_page_s``: seconds from each stall to its page on the console (target: <= 180);
   ``false_pages``: pages for the generating or the idle server (target: 0).
2. Host memory, on simulated time (the daemon's pipeline stepped every 15 s): node_exporter's real text
   with MemAvailable falling steadily from 20 GB to zero in 20, 40 or 90 min. ``stated_over_truth``: the
   minutes left the page states over the true minutes left when it fired (target: within 0.5-2);
   ``left_min``: the true minutes left at the page.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness.deployment import Exposition, SimulatedDaemon, VLLMServer, fixture, set_value, write_sd  # noqa: E402

GB = 1e9


def stall_on_wall_time(tmp: Path, limit_s: float = 300.0) -> dict[str, Any]:
    stalled, generating, idle, late = VLLMServer(), VLLMServer(), VLLMServer(), VLLMServer()
    stall_at = {stalled.address: 30.0, late.address: 60.0}
    sd = tmp / "rollout.json"
    write_sd(sd, [{"targets": [stalled.address, generating.address, idle.address], "labels": {"job": "vllm"}}])
    (tmp / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "state_db": str(tmp / "state.db"), "reward_outliers": False, "console": True,
        "file_sd": [{"files": [str(sd)], "job": "vllm", "interval": "5s"}]}))
    stop = threading.Event()
    t0 = time.monotonic()

    def move() -> None:
        added = False
        while not stop.is_set():
            t = time.monotonic() - t0
            for s in (stalled, generating, late):
                s.running, s.waiting = 32, 4
                if t < stall_at.get(s.address, float("inf")):
                    s.tokens += 2000
                s.render()
            if t >= 30 and not added:
                write_sd(sd, [{"targets": [stalled.address, generating.address, idle.address, late.address],
                               "labels": {"job": "vllm"}}])
                added = True
            stop.wait(1.0)

    mover = threading.Thread(target=move, daemon=True)
    mover.start()
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config", str(tmp / "monitor.yaml")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pages: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line.rstrip())
            if "FIRING" in line and "RolloutServerStalled" in line:
                for s in (stalled, generating, idle, late):
                    if f"server={s.address}" in line:
                        pages.setdefault(s.address, time.monotonic() - t0)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while time.monotonic() - t0 < limit_s and not {stalled.address, late.address} <= set(pages):
            time.sleep(1.0)
        time.sleep(10.0)  # a page for the healthy ones would come with the others
    finally:
        proc.terminate()
        proc.wait(15)
        stop.set()
        for s in (stalled, generating, idle, late):
            s.close()
    return {"stall_page_s": {name: round(pages[a] - stall_at[a], 1) if a in pages else None
                             for name, a in (("stalled", stalled.address), ("added_later", late.address))},
            "false_pages": sum(a in pages for a in (generating.address, idle.address)),
            "console": [ln for ln in lines if "RolloutServerStalled" in ln][:4]}


def host_memory_on_simulated_time(tmp: Path, minutes: float) -> dict[str, Any]:
    node = Exposition()
    text = fixture("node-exporter-meminfo.prom")
    sd = tmp / "nodes.json"
    write_sd(sd, [{"targets": [node.address], "labels": {"job": "node"}}])
    start, level = 300.0, 20 * GB

    def move(t: float) -> None:
        avail = max(0.2 * GB, level - level / (minutes * 60) * max(0.0, t - start))
        node.body = set_value(text, "node_memory_MemAvailable_bytes", avail)

    mon = SimulatedDaemon(tmp, {"file_sd": [{"files": [str(sd)], "interval": "15s"}]})
    try:
        mon.run(start + minutes * 60, step=15, before=move)
        pages = mon.fired("HostMemoryExhaustion")
        if not pages:
            return {"minutes_to_zero": minutes, "paged": False}
        fired = mon.first_fired[("HostMemoryExhaustion", pages[0].fingerprint)]
        truth = (start + minutes * 60 - fired) / 60
        stated = float(pages[0].annotations["summary"].split("about ")[1].split(" min")[0])
        return {"minutes_to_zero": minutes, "paged": True, "left_min": round(truth, 1), "stated_min": stated,
                "stated_over_truth": round(stated / truth, 2)}
    finally:
        mon.close()
        node.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="only the JSON line")
    ap.add_argument("--skip-wall", action="store_true", help="skip the ~2-min wall-time stall run")
    args = ap.parse_args()
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_wall:
            (Path(d) / "wall").mkdir()
            out["rollout_stall"] = stall_on_wall_time(Path(d) / "wall")
        out["host_memory"] = []
        for minutes in (20.0, 40.0, 90.0):
            sub = Path(d) / f"mem{int(minutes)}"
            sub.mkdir()
            out["host_memory"].append(host_memory_on_simulated_time(sub, minutes))
    if not args.json:
        for key, value in out.items():
            print(f"{key}: {value}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
