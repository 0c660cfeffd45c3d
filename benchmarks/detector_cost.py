"""Cost per update of the anomaly detectors (microseconds per sample, single thread).

    .venv/bin/python benchmarks/detector_cost.py [--data DIR] [--repeat 3] [--json]

Feeds each detector one series sample by sample, exactly as the evaluator does (`update(t, v)`
returning a Finding), and reports the best of --repeat runs in process CPU time (the machine is
shared; wall time would measure the neighbours): a NAB file (machine_temperature, 22 695
samples at 5 min, every sample judged) and a synthetic 30-s step series (judged in 5-min means), and
`context_anomaly` at several history lengths, to show how the cost grows with the window (sorted
windows: O(log n) comparisons plus a memmove of at most `history` pointers). One JSON line per case:
{"detector", "series", "history", "samples", "us_per_update"}.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import data_dir, emit, fail
from benchmarks._nab_scoring import read_series
from benchmarks.nab import epoch
from monitor.detectors.anomaly import RareValueDetector
from monitor.detectors.context import ContextAnomalyDetector

NAB_FILE = "realKnownCause/machine_temperature_system_failure.csv"


def per_update_us(make, times: list[float], values: list[float], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        det = make()
        update = det.update
        start = time.process_time()
        for t, v in zip(times, values, strict=True):
            update(t, v)
        best = min(best, time.process_time() - start)
    return best / len(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="datasets folder holding nab/ (default $VERL_OPS_DATASETS or ../shared/datasets; benchmarks/DATASETS.md)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest counts (default 3)")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        return fail(f"--repeat {args.repeat}: expected a count >= 1")
    data = data_dir(args.data, "nab")
    stamps, values = read_series(data / NAB_FILE)
    nab_t = [epoch(s) for s in stamps]
    rng = np.random.default_rng(0)
    step_t = (1_767_225_600.0 + 30.0 * np.arange(40_000)).tolist()
    step_v = np.exp(rng.normal(0, 0.3, len(step_t))).tolist()
    cases = [
        ("rare_value", "nab:machine_temperature", 4000, RareValueDetector, nab_t, values),
        ("context_anomaly", "nab:machine_temperature", 4000, ContextAnomalyDetector, nab_t, values),
        ("context_anomaly", "synthetic 30-s steps (5-min means)", 4000, ContextAnomalyDetector, step_t, step_v),
        ("context_anomaly", "synthetic 30-s steps (bucket 0)", 4000,
         lambda: ContextAnomalyDetector(bucket=0), step_t, step_v),
    ]
    for h in (1000, 16000):
        cases.append(("context_anomaly", "nab:machine_temperature", h,
                      (lambda h=h: ContextAnomalyDetector(history=h)), nab_t, values))
    for name, series, history, make, t, v in cases:
        us = per_update_us(make, t, v, args.repeat)
        row = {"detector": name, "series": series, "history": history, "samples": len(t),
               "us_per_update": round(us, 2)}
        if args.json:
            emit(row)
        else:
            print(f"{name:16s} {series:38s} history={history:<6d} {us:8.2f} us/update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
