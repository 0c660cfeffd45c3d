"""Paging delay of StragglerRank for a slow rank of a real torchrun run (issue 33.6), in wall time and steps.

    .venv/bin/python benchmarks/straggler_paging.py --slow-s 0.5 --json

Two ranks (gloo, CPU, the tiny model), rank 1 sleeping ``--slow-s`` in its rollout stage every step
(``faults.slow_rank``); the monitor scrapes rank 0's /metrics every second. Measured: from the first
scrape that holds both ranks' stage times to the page, and how many steps that was.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks.blind import InProcess  # noqa: E402
from benchmarks.verl_checkpoint_paging import firing  # noqa: E402


def _scrape(url: str) -> tuple[float | None, int]:
    """(the trainer's global step, how many ranks' rollout times it exports)."""
    step, ranks = None, 0
    for fam in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for s in fam.samples:
            if s.name == "verl_global_step":
                step = s.value
            elif s.name == "verl_rank_stage_seconds" and s.labels.get("stage") == "rollout":
                ranks += 1
    return step, ranks


def measure(slow_s: float, tmp: Path) -> dict[str, float | str | None]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "verl.cli.train", "--config", "ppo_tiny", "--metrics-port", "0", "trainer.total_steps=100000",
           "data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4",
           "faults.slow_rank=1", "faults.slow_rank_stage=rollout", f"faults.slow_rank_seconds={slow_s}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    daemon = None
    out: dict[str, float | str | None] = {"slow_s": slow_s}
    try:
        assert proc.stdout is not None
        url = next((ln.split()[1] for ln in proc.stdout if ln.startswith("metrics: ")), None)
        if url is None:
            raise SystemExit("error: the trainer printed no metrics URL")
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state.db"), "eval_interval": "0.5s",
               "reward_outliers": False, "console": False,
               "targets": [{"name": "trainer", "url": url, "interval": "1s"}]}
        (tmp / "m.yaml").write_text(yaml.safe_dump(cfg))
        daemon = InProcess(tmp / "m.yaml")
        first_t = first_step = None
        deadline = time.time() + 300
        while time.time() < deadline:
            step, ranks = _scrape(url)
            if first_t is None and ranks >= 2:
                first_t, first_step = time.time(), step
            paged = firing(daemon.url, "StragglerRank")
            if paged and first_t is not None and first_step is not None and step is not None:
                out["delay_s"] = round(time.time() - first_t, 1)
                out["delay_steps"] = step - first_step
                out["paged"] = ",".join(f"rank={a['labels']['rank']} stage={a['labels']['stage']} "
                                        f"node={a['labels']['node']}" for a in paged)
                break
            time.sleep(0.25)
    finally:
        if daemon is not None:
            daemon.stop()
        if proc.poll() is None:
            # SIGTERM first: torchrun starts each worker in a session of its own, so only its agent (which
            # forwards the signal to them) can end them; a SIGKILL to its group would orphan both ranks
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slow-s", type=float, default=0.5, help="seconds rank 1 sleeps in its rollout each step")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if not 0 < args.slow_s <= 60:
        print("error: --slow-s must be between 0 and 60 seconds", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args.slow_s, Path(tmp))
    print(json.dumps(result) if args.json else "\n".join(f"{k:12s} {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
