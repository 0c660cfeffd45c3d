"""Restart latency of a SIGKILLed trainer, measured on its own: hot standby vs cold restart.

    .venv/bin/python benchmarks/hot_restart.py --kills 3 --json

Hot: ``verl-train --hot-standby ... checkpoint.memory_interval=1``; once the standby says it is ready the
active PID is SIGKILLed, ``--kills`` times. Cold: the same trainer (disk checkpoints every
``--interval`` steps) SIGKILLed and started again with ``--resume-or-start`` by this script, as the soak
did before the standby. Per kill:

- ``lost_wall_s``: kill -> the first step completed after it, minus one median step (the step that
  would have completed anyway): wall time no step finished because of the kill;
- ``recomputed_steps``: steps logged before the kill that the successor did again (last logged step -
  the step it resumed from).

Times come from the trainer's log lines (its own clock, millisecond stamps), the kill time from this
process (same machine, same clock). ppo_tiny with 2 rollout workers, as in the soak.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO verl\.trainer: step (\d+)/")
RESUMED = re.compile(r"resumed from step (\d+)")


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


class Log:
    """Reads a process's output in the background: (time, step) of every step line, and the rest."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, int]] = []
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def follow(self, proc: subprocess.Popen[str]) -> None:
        def run() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                with self.lock:
                    self.lines.append(line)
                    if m := STEP.match(line):
                        self.steps.append((_stamp(m.group(1)), int(m.group(2))))
        threading.Thread(target=run, daemon=True).start()

    def wait_for(self, pattern: str, after: int = 0, timeout: float = 120.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for line in self.lines[after:]:
                    if m := re.search(pattern, line):
                        return m
            time.sleep(0.01)
        raise TimeoutError(f"no line matching {pattern!r} within {timeout:.0f}s")

    def first_step_after(self, t: float, timeout: float = 120.0) -> tuple[float, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                later = [s for s in self.steps if s[0] > t]
            if later:
                return later[0]
            time.sleep(0.01)
        raise TimeoutError("no step after the kill")


def _args(ckpt: Path, mem: Path, interval: int) -> list[str]:
    return ["--config", "ppo_tiny", "--checkpoint-dir", str(ckpt), "trainer.total_steps=1000000",
            "rollout_worker_num=2", f"checkpoint.interval={interval}", "checkpoint.memory_interval=1",
            f"checkpoint.memory_dir={mem}", "metrics.layer_kl=false"]


def _record(log: Log, killed_at: float, last_before: int, median: float) -> dict[str, float]:
    t_next, _ = log.first_step_after(killed_at)
    resumed = int(RESUMED.findall("".join(log.lines))[-1])
    return {"lost_wall_s": round(t_next - killed_at - median, 3), "kill_to_next_step_s": round(t_next - killed_at, 3),
            "recomputed_steps": last_before - resumed}


def _median_step(log: Log) -> float:
    times = [t for t, _ in log.steps[-20:]]
    return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))


def hot(kills: int, interval: int, work: Path) -> list[dict[str, float]]:
    cmd = [sys.executable, "-m", "verl.cli.train", "--hot-standby", *_args(work / "hot", work / "hot-mem", interval)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    log, out = Log(), []
    log.follow(proc)
    try:
        for _ in range(kills):
            mark = len(log.lines)
            log.wait_for(r"hot-standby: standby pid \d+ ready", after=mark)
            time.sleep(2.0)  # a few steady steps for the median
            pid = int(re.findall(r"hot-standby: active trainer pid (\d+)", "".join(log.lines))[-1])
            median, last_before = _median_step(log), log.steps[-1][1]
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            out.append(_record(log, killed_at, last_before, median))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    return out


def cold(kills: int, interval: int, work: Path) -> list[dict[str, float]]:
    args = _args(work / "cold", work / "cold-mem", interval)
    args[args.index("checkpoint.memory_interval=1")] = "checkpoint.memory_interval=0"
    out: list[dict[str, float]] = []
    pending: tuple[float, int, float] | None = None  # (kill time, last step logged, median step) of the last kill
    for round_ in range(kills + 1):
        proc = subprocess.Popen([sys.executable, "-m", "verl.cli.train", *args, "--resume-or-start"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = Log()
        log.follow(proc)
        try:
            if pending is not None:  # this process is the restart after the previous kill
                out.append(_record(log, *pending))
            if round_ == kills:
                break
            deadline = time.monotonic() + 120
            while len(log.steps) < 12 and time.monotonic() < deadline:
                time.sleep(0.05)
            pending = (time.time(), log.steps[-1][1], _median_step(log))
        finally:
            proc.kill()
            proc.wait()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=3, help="SIGKILLs per mode")
    p.add_argument("--interval", type=int, default=10, help="disk checkpoint interval, steps")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hot-restart-") as tmp:
        work = Path(tmp)
        result = {"benchmark": "hot_restart", "kills": args.kills, "hot": hot(args.kills, args.interval, work),
                  "cold": cold(args.kills, args.interval, work)}
    for mode in ("hot", "cold"):
        lost = [k["lost_wall_s"] for k in result[mode]]
        result[f"{mode}_lost_wall_s_median"] = round(statistics.median(lost), 3)
        result[f"{mode}_recomputed_steps_max"] = max(k["recomputed_steps"] for k in result[mode])
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
