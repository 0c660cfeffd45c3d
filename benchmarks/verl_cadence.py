"""Detection delay against step time on verl-shaped runs (issue 14), on simulated time.

    .venv/bin/python benchmarks/verl_cadence.py [--step-times 15,45,90,180,360,720] [--seeds 1] [--json]

Each case writes a verl ``file``-logger JSONL as the run goes (benchmarks/verl_runs.py: PPO in 0.7's shape
through the 8 KB text buffer, GRPO in 0.8's shape line by line), tails it with the monitor's
``JsonlTail`` (polled at every write and every 30 s of simulated time), feeds the default rules through
the daemon's ``Pipeline`` and keeps polling for 2 h or 10 steps after the run ends (file closed; PPO
runs give ``total_steps``, GRPO runs do not). Faults from step 100: reference KL rising 16x over 60
steps, GPU memory growing 20 MB/min, or each step taking twice as long (``perf/throughput`` halved). One JSON line per case: delay of the expected alert after the
fault's onset in minutes and steps, and every other alert (a false alarm; a healthy run and its normal
finish must have none). Last line: a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerting.clock import SimulatedClock
from benchmarks.verl_runs import LiveWriter, RunSpec, generate
from monitor.evaluation.rules import Rule, load_rule_files
from monitor.pipeline import Pipeline
from monitor.sources.verl_jsonl import JsonlTail, RunLiveness

ONSET = 100
FAULTS = {"kl_drift": "KLDriftDetected", "memory_climb": "MemoryLeakSuspected", "throughput_halved": "ThroughputDrop",
          "healthy": None}


def simulate(spec: RunSpec, rules: list[Rule], workdir: Path, total_steps: int | None, poll_s: float = 30.0,
             after_s: float | None = None) -> tuple[list[tuple[float, dict[str, str]]], list[float]]:
    """(firing time, labels) of every alert, and the true record times."""
    records, times = generate(spec)
    path = workdir / f"{spec.algo}-{spec.version}-{int(spec.step_s)}-{spec.seed}.jsonl"
    writer = LiveWriter(path, spec.version)
    clock = SimulatedClock(float(times[0]) - spec.step_s)
    fired: list[tuple[float, dict[str, str]]] = []

    def on_record(r: dict) -> None:
        if r.get("kind") == "alert" and r.get("status") == "firing":
            fired.append((clock.now(), dict(r["labels"])))

    pipe = Pipeline(rules, clock, on_record=on_record)
    tail = JsonlTail(path, "gpu-08", liveness=RunLiveness(total_steps, writer_open=lambda: not writer.closed))

    def poll(now: float) -> None:
        clock.set(max(now, clock.now()))
        pipe.ingest(tail.poll(clock.now()).samples, "jsonl")
        pipe.tick()

    end = float(times[-1]) + (after_s if after_s is not None else max(7200.0, 10 * spec.step_s))
    now = clock.now()
    for i, t in enumerate([*times.tolist(), end]):
        while now + poll_s < t:
            now += poll_s
            poll(now)
        if i < len(records):
            writer.log(records[i], t)
        else:
            break
        if i == len(records) - 1:
            writer.close(t + 1.0)
        now = t + 0.5
        poll(now)
    tail.close()
    pipe.close()
    return fired, times.tolist()


def run_case(fault: str, algo: str, step_s: float, seed: int, rules: list[Rule], workdir: Path) -> dict:
    version = "0.7" if algo == "ppo" else "0.8"
    steps = 240 if fault != "healthy" else 200
    spec = RunSpec(version=version, algo=algo, steps=steps, step_s=step_s, seed=seed,
                   kl_drift_at=ONSET if fault == "kl_drift" else None,
                   leak_at=ONSET if fault == "memory_climb" else None, leak_mb_per_min=20.0,
                   throughput_drop_at=ONSET if fault == "throughput_halved" else None)
    started = time.process_time()
    fired, times = simulate(spec, rules, workdir, total_steps=steps if algo == "ppo" else None)
    expected = FAULTS[fault]
    onset_t = times[ONSET - 1]
    hit = next((t for t, lab in fired if lab["alertname"] == expected and t >= onset_t), None) if expected else None
    false = [lab["alertname"] for t, lab in fired if lab["alertname"] != expected or t < onset_t]
    out = {"benchmark": "verl_cadence", "fault": fault, "algo": algo, "version": version, "step_s": step_s,
           "seed": seed, "expected": expected, "detected": hit is not None if expected else None,
           "delay_min": round((hit - onset_t) / 60.0, 1) if hit is not None else None,
           "delay_steps": round((hit - onset_t) / step_s, 1) if hit is not None else None,
           "false_alarms": sorted(set(false)), "false_alarm_count": len(false),
           "cpu_s": round(time.process_time() - started, 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-times", default="15,45,90,180,360,720")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args(argv)
    try:
        step_times = [float(x) for x in args.step_times.split(",") if x]
    except ValueError:
        print(f"error: --step-times {args.step_times!r}: expected seconds like 15,45,720", file=sys.stderr)
        return 2
    faults = [f for f in args.faults.split(",") if f]
    if not set(faults) <= set(FAULTS):
        print(f"error: --faults: use some of {','.join(FAULTS)}", file=sys.stderr)
        return 2
    rules = load_rule_files(None)
    results = []
    with tempfile.TemporaryDirectory(prefix="verl-cadence-") as tmp:
        for step_s in step_times:
            for fault in faults:
                for algo in ("ppo", "grpo"):
                    for seed in range(args.seeds):
                        r = run_case(fault, algo, step_s, seed, rules, Path(tmp))
                        results.append(r)
                        print(json.dumps(r) if args.json else
                              f"{fault:13s} {algo:4s} {step_s:6.0f}s  detected={r['detected']} "
                              f"delay={r['delay_min']} min / {r['delay_steps']} steps  false={r['false_alarms']}",
                              flush=True)
    faulty = [r for r in results if r["expected"]]
    summary = {"benchmark": "verl_cadence", "cases": len(results),
               "detected": sum(bool(r["detected"]) for r in faulty), "faulty_cases": len(faulty),
               "missed": [f"{r['fault']}/{r['algo']}/{r['step_s']:.0f}s" for r in faulty if not r["detected"]],
               "false_alarms": sum(r["false_alarm_count"] for r in results),
               "cpu_s": round(sum(r["cpu_s"] for r in results), 1)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
