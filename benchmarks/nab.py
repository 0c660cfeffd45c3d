"""NAB: the monitor's streaming detectors, through the `nab` rule profile, scored like NAB v1.1.

    .venv/bin/python benchmarks/nab.py [--data DIR] [--rules monitor/rules/nab.yaml] [--json] [--bare] [--sweep A,B]

Each file is replayed once, in time order, through the daemon's Pipeline (series store, evaluator,
alert state machine, on simulated time) with the profile's rules; a detection is a firing alert
record. With --bare the detectors built from the same rules (`Condition.new_detector()`) are fed
directly and a detection is the rising edge of `active`; the two agree except where the store
rejects out-of-order samples (11 rows of ec2_request_latency_system_failure.csv). --sweep uses --bare and
sets the detector's threshold parameter (`threshold` of context_anomaly, `alpha` of rare_value) to each
value for all three profiles.
Prints per-file scores, then one JSON line {"standard": s, "reward_low_FP": s, "reward_low_FN": s}.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, data_dir, emit, fail, load_profile
from benchmarks._nab_scoring import (
    PROFILE_KEYS,
    FileScore,
    load_profiles,
    load_windows,
    nab_files,
    normalised,
    read_series,
    score_file,
)
from benchmarks._replay import replay_firing
from monitor.detectors import registry
from monitor.evaluation.rules import Rule
from monitor.sources.recorded import from_columns

DEFAULT_RULES = ROOT / "monitor" / "rules" / "nab.yaml"
SWEPT = {"rare_value": "alpha"}  # the parameter --sweep sets, by detector type (default: threshold)


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts).replace(tzinfo=timezone.utc).timestamp()


def profile_rules(rules: list[Rule]) -> dict[str, Rule]:
    by_profile = {r.labels.get("nab_profile"): r for r in rules}
    missing = [p for p in PROFILE_KEYS if p not in by_profile]
    if missing:
        raise SystemExit(fail(f"rules file has no rule labelled nab_profile: {missing[0]}; add one per NAB profile"))
    return {p: by_profile[p] for p in PROFILE_KEYS}


def detect(rule: Rule, times: list[float], values: list[float], **override: float) -> list[bool]:
    """One causal pass: True on the rows where the rule's alert starts firing."""
    cond = rule.conditions[0]
    detector = registry.build(cond.detector_type, {**cond.params, **override}) if override else cond.new_detector()
    out, was_active = [], False
    for t, v in zip(times, values, strict=True):
        active = detector.update(t, v).active
        out.append(active and not was_active)
        was_active = active
    return out


def detect_in_pipeline(rules: dict[str, Rule], times: list[float], values: list[float]) -> dict[str, list[bool]]:
    """The daemon's whole path: Pipeline (store, evaluator, alert state machine) on simulated time."""
    fired = replay_firing(from_columns([("nab_value", {"node": "nab"}, times, values)], 0), list(rules.values()))
    row = {t: i for i, t in enumerate(times)}
    out = {p: [False] * len(times) for p in rules}
    for labels, t in fired:
        out[labels["nab_profile"]][row[t]] = True
    return out


def run(data: Path, rules: dict[str, Rule], files: list[str] | None = None, pipeline: bool = False,
        **override: float) -> dict[str, list[tuple[str, FileScore]]]:
    costs = load_profiles(data)
    windows = load_windows(data)
    results: dict[str, list[tuple[str, FileScore]]] = {p: [] for p in rules}
    for name in files or nab_files(data):
        stamps, values = read_series(data / name)
        times = [epoch(s) for s in stamps]
        if pipeline:
            dets = detect_in_pipeline(rules, times, values)
        else:
            dets = {p: detect(rule, times, values, **override) for p, rule in rules.items()}
        for profile, det in dets.items():
            results[profile].append((name, score_file(stamps, det, windows[name], costs[profile])))
    return results


def summary(data: Path, results: dict[str, list[tuple[str, FileScore]]]) -> dict[str, float]:
    costs = load_profiles(data)
    return {p: round(normalised([s for _, s in rows], costs[p]), 1) for p, rows in results.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="datasets folder holding nab/ (default $VERL_OPS_DATASETS or ../shared/datasets; benchmarks/DATASETS.md)")
    ap.add_argument("--rules", default=str(DEFAULT_RULES), help="rule profile (default monitor/rules/nab.yaml)")
    ap.add_argument("--json", action="store_true", help="per-file lines as JSON too")
    ap.add_argument("--sweep", metavar="A,B,...",
                    help="also print the scores with these threshold (rare_value: alpha) values (sensitivity)")
    ap.add_argument("--bare", action="store_true", help="feed the rules' detectors directly, without the Pipeline")
    args = ap.parse_args(argv)
    data = data_dir(args.data, "nab")
    rules = profile_rules(load_profile(Path(args.rules)))
    try:
        alphas = [float(a) for a in args.sweep.split(",")] if args.sweep else []
    except ValueError:
        return fail(f"--sweep {args.sweep}: expected comma-separated numbers, e.g. 3.5,3.75,4")
    knob = SWEPT.get(rules["standard"].conditions[0].detector_type, "threshold")
    for value in alphas:
        emit({knob: value, **summary(data, run(data, rules, **{knob: value}))})
    results = run(data, rules, pipeline=not args.bare)
    names = [n for n, _ in results["standard"]]
    for i, name in enumerate(names):
        per = {p: results[p][i][1] for p in results}
        if args.json:
            emit({"file": name, **{p: round(s.score, 4) for p, s in per.items()},
                  "detections": per["standard"].tp + per["standard"].fp})
        else:
            print(f"{name:60s} " + " ".join(f"{p}={s.score:7.3f}" for p, s in per.items())
                  + f"  windows={per['standard'].windows}")
    emit(summary(data, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
