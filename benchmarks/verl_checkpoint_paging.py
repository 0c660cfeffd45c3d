"""Paging delay of verl's checkpoint-directory alerts on a live log (issue 33.5), in wall time.

    .venv/bin/python benchmarks/verl_checkpoint_paging.py --step-s 2 [--version 0.6] --json

A verl 0.9 run is simulated in real time: one record every ``--step-s`` into a JSONL the daemon tails, a
save every 5 steps laid out as verl 0.9.1 does (``global_step_N/actor/...``, ``data.pt``, then the tracker);
from step 10 on the tracker is no longer written (``async_save``). Measured: from global_step_10's finish
marker to CheckpointTrackerStale firing; then the run is relaunched over its checkpoints (the log
truncated, steps from 1), and from the relaunch's first record to TrainingStepRegressed firing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

from benchmarks.blind import InProcess  # noqa: E402
from benchmarks.verl_runs import LiveWriter, RunSpec, generate  # noqa: E402


def _save(root: Path, step: int, tracker: bool) -> float:
    d = root / f"global_step_{step}" / "actor"
    d.mkdir(parents=True)
    (d / "model_world_size_1_rank_0.pt").write_bytes(b"\0" * 4096)
    (d.parent / "data.pt").write_bytes(b"d")
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return time.time()


def firing(url: str, name: str) -> list[dict]:
    """The monitor's firing alerts of that name (its /api/v1/alerts)."""
    return [a for a in httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


def _wait_firing(url: str, name: str, timeout: float) -> float | None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if firing(url, name):
            return time.time()
        time.sleep(0.25)
    return None


def measure(step_s: float, tmp: Path, version: str = "0.9") -> dict[str, float | str | bool | None]:
    ckpt, log = tmp / "ckpt", tmp / "exp.jsonl"
    ckpt.mkdir()
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state.db"), "eval_interval": "0.5s",
           "reward_outliers": False, "console": False,
           "jsonl": [{"path": str(log), "node": "bench", "checkpoint_dir": str(ckpt), "down_after": "1h"}]}
    (tmp / "m.yaml").write_text(yaml.safe_dump(cfg))
    daemon = InProcess(tmp / "m.yaml")
    url = daemon.url
    records, _ = generate(RunSpec(version=version, algo="grpo", steps=200, step_s=step_s))
    out: dict[str, float | str | bool | None] = {"version": version, "step_s": step_s}
    try:
        writer = LiveWriter(log, version)
        stale_from = 0.0
        for r in records[:11]:
            if r["step"] % 5 == 0:
                done = _save(ckpt, r["step"], tracker=r["step"] < 10)
                stale_from = done if r["step"] == 10 else stale_from
            writer.log(r, time.time())
            time.sleep(step_s)
        fired = _wait_firing(url, "CheckpointTrackerStale", 300)
        # the run's own saves ran ahead of its (buffered, before 0.8) log all along: that is no regression
        out["regressed_before_relaunch"] = bool(firing(url, "TrainingStepRegressed"))
        out["tracker_stale_delay_s"] = None if fired is None else round(fired - stale_from, 1)
        relaunch = LiveWriter(log, version)
        started = time.time()
        fired = None
        for r in records[:60]:
            relaunch.log(r, time.time())
            fired = _wait_firing(url, "TrainingStepRegressed", step_s)
            if fired is not None:
                break
        out["step_regressed_delay_s"] = None if fired is None else round(fired - started, 1)
    finally:
        daemon.stop()
    for key in ("tracker_stale", "step_regressed"):
        delay = out[f"{key}_delay_s"]
        out[f"{key}_delay_steps"] = None if not isinstance(delay, float) else round(delay / step_s, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-s", type=float, default=2.0, help="seconds per simulated verl step (default 2)")
    p.add_argument("--version", choices=("0.6", "0.7", "0.8", "0.9"), default="0.9",
                   help="verl release whose log shape (and 8 KB buffering before 0.8) is written")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if not 0.05 <= args.step_s <= 60:
        print("error: --step-s must be between 0.05 and 60 seconds", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args.step_s, Path(tmp), args.version)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
