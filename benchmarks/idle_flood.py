"""Do /healthz and /metrics answer while idle connections hold the listener? (issues 35, 36)

    python benchmarks/idle_flood.py [--json] [--idle 130] [--polls 40] [--tree DIR]

Starts ``verl-monitor run`` (token set, no targets) from ``--tree`` (default: this checkout; point it at
another checkout to compare listeners) as its own process, opens ``--idle`` connections that send
nothing, then polls /healthz and /metrics alternately ``--polls`` times on fresh connections (3 s
timeout each). Reports the polls answered 200, their latency, and the daemon's RSS and thread count
before and under the flood, and beforehand the median time of 100 answers of each on one kept-alive
connection. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.ports import free_port  # noqa: E402


def run(tree: Path, idle: int, polls: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="idle-flood-"))
    port = free_port()
    (work / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{port}", "state_db": str(work / "state" / "state.db"), "targets": [],
        "bearer_token": "bench", "eval_interval": "1s"}))
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config", str(work / "monitor.yaml")],
                            cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        for _ in range(20):  # warm: imports and first requests done before the baseline
            httpx.get(f"{url}/metrics", timeout=5)
            httpx.get(f"{url}/api/v1/alerts", headers={"Authorization": "Bearer bench"}, timeout=5)
        keepalive = {}  # one kept-alive client: the listener's own cost per answer, without a handshake
        with httpx.Client(timeout=5) as client:
            for path in ("/healthz", "/metrics"):
                ts = []
                for _ in range(100):
                    t = time.perf_counter()
                    client.get(f"{url}{path}")
                    ts.append(time.perf_counter() - t)
                keepalive[path] = round(statistics.median(ts) * 1000, 2)
        me = psutil.Process(proc.pid)
        rss_before, threads_before = me.memory_info().rss, me.num_threads()
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
        answered, took = 0, []
        for i in range(polls):
            t = time.perf_counter()
            try:
                ok = httpx.get(f"{url}{'/healthz' if i % 2 == 0 else '/metrics'}", timeout=3).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                answered += 1
                took.append(time.perf_counter() - t)
        rss_under, threads_under = me.memory_info().rss, me.num_threads()
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(15)
    return {"tree": str(tree), "idle": idle, "polls": polls, "answered": answered,
            "latency_ms_p50": round(statistics.median(took) * 1000, 1) if took else None,
            "latency_ms_max": round(max(took) * 1000, 1) if took else None,
            "keepalive_ms_p50": keepalive,
            "rss_mb_before": round(rss_before / 2**20, 1), "rss_mb_under_flood": round(rss_under / 2**20, 1),
            "threads_before": threads_before, "threads_under_flood": threads_under}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle", type=int, default=130)
    p.add_argument("--polls", type=int, default=40)
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose monitor to run")
    p.add_argument("--json", action="store_true", help="only the JSON line")
    args = p.parse_args()
    out = run(args.tree.resolve(), args.idle, args.polls)
    if not args.json:
        print(f"{out['answered']}/{out['polls']} polls answered under {out['idle']} idle connections; "
              f"RSS {out['rss_mb_before']} -> {out['rss_mb_under_flood']} MB, "
              f"threads {out['threads_before']} -> {out['threads_under_flood']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
