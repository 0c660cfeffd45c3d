"""Runs written by volcengine verl's own code, replayed live with the default rules (issue 22).

    .venv/bin/python benchmarks/verl_runs_real.py [--data benchmarks/data/verl_real] [--restart] [--json]

The data (``<run>.jsonl.gz`` + ``<run>.truth.json``) comes from benchmarks/verl_real_runs_writer.py, run with
verl 0.9.1 from PyPI in its own virtual environment (see that file): PPO and GRPO; healthy, KL penalty off
(KL drifting up 0.0008/step), GPU memory leak, one NaN grad-norm step, reward collapse; 10 s, 3 min and
12 min steps that grow with the response length; KL to the reference starting at 0.

Each run's lines are written to a file at their true times (verl 0.9's unbuffered writer: line by line,
mtime = the record's time), tailed by ``JsonlTail`` (polled at each write and every 30 s of simulated
time) into the daemon's ``Pipeline``. ``--restart``: the monitor is stopped and a fresh one started (same
offset store, nothing else kept) two steps before the fault (healthy runs: at step 100), the case of a
monitor restart right before a fault.

Scored per run: a healthy run pages nothing (P0-P2; UnusualTrainingMetric, P3, is counted apart); a
fault pages its alert within its deadline in steps (KL drift 60, reward collapse 10, NaN 2, leak 30), the
alert of a lasting fault (all but NaN) stays firing to the end of the run, a leak alert's rate is within
2x of the true rate; any other P0-P2 alert, or the expected one before the onset, is a false page.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerting.clock import SimulatedClock
from monitor.evaluation.rules import Rule, load_rule_files
from monitor.pipeline import Pipeline
from monitor.sources.tail_state import OffsetStore
from monitor.sources.verl_jsonl import JsonlTail, RunLiveness

DATA = Path(__file__).parent / "data" / "verl_real"
EXPECTED = {"kl_off": ("KLDriftDetected", 60), "collapse": ("RewardDistributionDrift", 10),
            "nan": ("NonFiniteGradients", 2), "leak": ("MemoryLeakSuspected", 30)}
LASTING = {"kl_off", "collapse", "leak"}
# further alerts that name the same fault truly: a GRPO reward collapse (every response scored 0) leaves every
# group's rewards equal, so its advantages are 0 -- the learning signal is lost, and saying so is right
ALSO_ABOUT = {"collapse": {"LearningSignalLost"}}
PAGES = {"P0", "P1", "P2"}
RATE_RE = re.compile(r"up (-?[\d.]+) MB/min")


def simulate(lines: list[bytes], times: list[float], step_s: float, rules: list[Rule], workdir: Path,
             restart_at: int | None, poll_s: float = 30.0, truncate_at: int | None = None,
             total_steps: int | None = None, resolved_config: Path | None = None) -> list[tuple[float, dict]]:
    """(time, alert record) of every firing/resolved transition, over monitors restarted at ``restart_at``;
    ``truncate_at``: the line index where verl restarted and re-opened its log with "wb" (a resume), after
    which the lines outnumber the steps (``total_steps``, trainer.total_training_steps; default: the lines)."""
    path = workdir / "run.jsonl"
    fh = path.open("wb")
    closed = {"v": False}
    clock = SimulatedClock(times[0] - step_s)
    events: list[tuple[float, dict]] = []
    offsets = OffsetStore(workdir / "offsets.json")

    def on_record(r: dict) -> None:
        if r.get("kind") == "alert":
            events.append((clock.now(), r))

    def start() -> tuple[Pipeline, JsonlTail]:
        pipe = Pipeline(rules, clock, on_record=on_record)
        tail = JsonlTail(path, "gpu-08", offsets=offsets,
                         liveness=RunLiveness(total_steps or len(lines), writer_open=lambda: not closed["v"]),
                         resolved_config=resolved_config)
        return pipe, tail

    pipe, tail = start()

    def poll(now: float) -> None:
        clock.set(max(now, clock.now()))
        pipe.ingest(tail.poll(clock.now()).samples, "jsonl")
        pipe.tick()

    end = times[-1] + max(3600.0, 5 * step_s)
    now = clock.now()
    for i, t in enumerate([*times, end]):
        if truncate_at is not None and i == truncate_at:
            # a resume: the old trainer died after its last record (no process holds the log), the relaunch
            # re-opens the log with "wb" halfway through the gap, then loads its checkpoint and logs again
            closed["v"] = True
            relaunch = (times[i - 1] + t) / 2.0
            while now + poll_s < relaunch:
                now += poll_s
                poll(now)
            fh.close()
            fh = path.open("wb")
            closed["v"] = False
        while now + poll_s < t:
            now += poll_s
            poll(now)
        if i == len(lines):
            break
        if restart_at is not None and i + 1 == restart_at:
            tail.close()
            pipe.close()
            events.append((now, {"kind": "restart"}))
            pipe, tail = start()
        fh.write(lines[i])
        fh.flush()
        os.utime(path, (t, t))
        if i == len(lines) - 1:
            fh.close()
            closed["v"] = True
        now = t + 0.5
        poll(now)
    tail.close()
    pipe.close()
    return events


def score(truth: dict, events: list[tuple[float, dict]]) -> dict:
    times, step_s, fault = truth["times"], truth["step_s"], truth["fault"]
    onset = truth["onset_step"]
    onset_t = times[onset - 1] if onset else None
    end_t = times[-1]
    expected, deadline = EXPECTED.get(fault, (None, 0))
    firing = [(t, r) for t, r in events if r.get("status") == "firing"]
    hit = next(((t, r) for t, r in firing if r["labels"]["alertname"] == expected and t >= onset_t), None) \
        if expected else None
    about = {expected} | ALSO_ABOUT.get(fault, set())
    false = sorted({r["labels"]["alertname"] for t, r in firing if r["labels"].get("severity") in PAGES
                    and not (r["labels"]["alertname"] in about and onset_t is not None and t >= onset_t)})
    unusual = sum(r["labels"]["alertname"] == "UnusualTrainingMetric" for _, r in firing)
    out: dict = {"run": truth["run"], "fault": fault, "algo": truth["algo"], "step_s": step_s,
                 "expected": expected, "false_pages": false, "unusual_p3": unusual}
    ok = not false
    if expected:
        delay = None
        if hit is not None:
            # in steps: records logged between the onset and the firing (the steps the fault was visible)
            delay = sum(1 for x in times if onset_t <= x <= hit[0])
        out["delay_steps"] = delay
        out["in_deadline"] = delay is not None and delay <= deadline
        ok = ok and bool(out["in_deadline"])
        if hit is not None and fault in LASTING:
            fp = hit[1]["fingerprint"]
            resolved = [t for t, r in events if r.get("status") == "resolved" and r.get("fingerprint") == fp
                        and hit[0] < t <= end_t]
            out["stays_firing"] = not resolved
            ok = ok and not resolved
        if hit is not None and fault == "leak":
            # the rate a user reads: the summary's "rising/ratcheting up X MB/min"
            found = RATE_RE.search(hit[1].get("annotations", {}).get("summary", ""))
            rate = float(found.group(1)) if found else 0.0
            out["rate_mb_min"] = round(rate, 1)
            out["true_rate_mb_min"] = truth["leak_mb_per_min"]
            ratio = rate / truth["leak_mb_per_min"] if truth["leak_mb_per_min"] else 0.0
            out["rate_within_2x"] = 0.5 <= ratio <= 2.0
            ok = ok and out["rate_within_2x"]
    out["ok"] = ok
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="folder of <run>.jsonl.gz + <run>.truth.json")
    ap.add_argument("--restart", action="store_true", help="restart the monitor 2 steps before each fault")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args(argv)
    data = Path(args.data)
    truths = sorted(data.glob("*.truth.json"))
    if not truths:
        print(f"error: --data {data}: no <run>.truth.json files; write them with benchmarks/verl_real_runs_writer.py",
              file=sys.stderr)
        return 2
    rules = load_rule_files(None)
    results = []
    started = time.process_time()
    for tp in truths:
        truth = json.loads(tp.read_text())
        if args.only and truth["run"] not in args.only.split(","):
            continue
        lines = gzip.decompress((data / f"{truth['run']}.jsonl.gz").read_bytes()).splitlines(keepends=True)
        restart_at = None
        if args.restart:
            restart_at = max(2, (truth["onset_step"] or 100) - 2)
        with tempfile.TemporaryDirectory(prefix="verl-real-") as tmp:
            events = simulate(lines, truth["times"], truth["step_s"], rules, Path(tmp), restart_at)
        r = score(truth, events)
        r["restart"] = restart_at
        results.append(r)
        print(json.dumps(r) if args.json else
              f"{r['run']:22s} ok={r['ok']!s:5s} delay={r.get('delay_steps')} steps  stays={r.get('stays_firing')} "
              f"rate={r.get('rate_mb_min')}  false={r['false_pages']}", flush=True)
    summary = {"benchmark": "verl_runs_real", "restart": args.restart, "runs": len(results),
               "ok": sum(r["ok"] for r in results), "failed": [r["run"] for r in results if not r["ok"]],
               "false_pages": sum(len(r["false_pages"]) for r in results),
               "cpu_s": round(time.process_time() - started, 1)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
