"""The training-signal catalogue measured as detection engineers measure: false pages on a healthy corpus and
detection above each family's boundary, on runs written by verl 0.9.1's own code, replayed live.

    cd /tmp && /work/verl-venv/bin/python $REPO/benchmarks/verl_real_runs_writer.py --set signals --seed 40 --out /tmp/verl_signals
    .venv/bin/python benchmarks/verl_signal_corpus.py --data /tmp/verl_signals [--jobs 2] [--json]

The data (benchmarks/verl_signal_corpus_runs.py, ~30 MB, so written rather than committed; a two-run
sample is in benchmarks/data/verl_signals_sample) is (a) >= 200 healthy runs -- PPO, GRPO, REINFORCE++, RLOO, DAPO;
10 s-1 h steps, up to +-50 % jitter, validation and checkpoints, lr warm-ups, x5 response growth, noisy
rewards, fully-async staleness, resumes -- and (b) a sweep per fault family over magnitude x ramp x cadence.
Each run is replayed as benchmarks/verl_families.py replays one (line by line at its true time, tailed into
the daemon's Pipeline with the default rules) and scored by its ``score``.

Reported: P0-P2 false pages per 100 run-days of the healthy corpus (goal 0), per alert; per family, the
detection rate of the runs at or above its documented boundary (paged by its alert within ``ramp + deadline``
steps; goal >= 95 %), the rate below it (not promised), whether the page held, and the median delay in steps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.verl_families import RULES, score
from benchmarks.verl_runs_real import simulate

SAMPLE = Path(__file__).parent / "data" / "verl_signals_sample"
# pages a fault really causes besides its own: collapsed responses lower tokens/s per GPU (a step's fixed costs
# stay); counted apart (``collateral_pages``), not as false pages
COLLATERAL = {"length_collapse": {"ThroughputDrop"}}


def replay(data: Path, truth: dict) -> list[tuple[float, dict]]:
    """benchmarks/verl_families.py's replay, polled ~6 times a step (at least every 30 s, at most every 5 min):
    the catalogue judges steps, and a 1-h-step run polled every 30 s costs 120 polls a step."""
    lines = gzip.decompress((data / f"{truth['run']}.jsonl.gz").read_bytes()).splitlines(keepends=True)
    poll_s = min(300.0, max(30.0, truth["step_s"] / 6.0))
    with tempfile.TemporaryDirectory(prefix="verl-signals-") as tmp:
        return simulate(lines, truth["times"], truth["step_s"], RULES, Path(tmp), None, poll_s=poll_s,
                        truncate_at=truth.get("restart_index"), total_steps=truth["steps"])


def judge(args: tuple[str, str]) -> dict:
    data, truth_path = Path(args[0]), Path(args[1])
    truth = json.loads(truth_path.read_text())
    r = score(truth, replay(data, truth))
    times = truth["times"]
    r["run_days"] = (times[-1] - times[0] + truth["step_s"]) / 86400.0
    for k in ("magnitude", "ramp_steps", "above_boundary"):
        r[k] = truth.get(k)
    return r


def summarise(results: list[dict]) -> dict:
    for r in results:
        collateral = COLLATERAL.get(r["fault"], set())
        r["collateral_pages"] = sorted(set(r["false_pages"]) & collateral)
        r["false_pages"] = sorted(set(r["false_pages"]) - collateral)
    healthy = [r for r in results if r["fault"] == "healthy"]
    days = sum(r["run_days"] for r in healthy)
    by_alert = Counter(a for r in healthy for a in r["false_pages"])
    families: dict[str, dict] = {}
    for fam in sorted({r["fault"] for r in results} - {"healthy"}):
        runs = [r for r in results if r["fault"] == fam]
        above = [r for r in runs if r["above_boundary"]]
        below = [r for r in runs if not r["above_boundary"]]
        delays = [r["delay_steps"] for r in above if r.get("in_deadline")]
        families[fam] = {
            "runs_above": len(above),
            "detected_above": round(sum(bool(r.get("in_deadline")) for r in above) / len(above), 3) if above else None,
            "held_above": round(sum(bool(r.get("in_deadline")) and not r["uncovered_after"] and not r["repaged"]
                                    for r in above) / len(above), 3) if above else None,
            "median_delay_steps": statistics.median(delays) if delays else None,
            "runs_below": len(below),
            "detected_below": round(sum(bool(r.get("in_deadline")) for r in below) / len(below), 3) if below else None,
            "missed_above": [r["run"] for r in above if not r.get("in_deadline")],
            "other_pages": sorted({a for r in runs for a in r["false_pages"]}),
        }
    return {"benchmark": "verl_signal_corpus", "healthy_runs": len(healthy), "healthy_run_days": round(days, 1),
            "false_pages": sum(len(r["false_pages"]) for r in healthy),
            "false_pages_per_100_run_days": round(100.0 * sum(len(r["false_pages"]) for r in healthy) / days, 2) if days else None,
            "false_pages_by_alert": dict(by_alert),
            "healthy_runs_paged": [r["run"] for r in healthy if r["false_pages"]],
            "unusual_p3_per_run": round(sum(r["unusual_p3"] for r in healthy) / len(healthy), 2) if healthy else None,
            "families": families}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder of <run>.jsonl.gz + <run>.truth.json (--set signals)")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--jobs", type=int, default=1, help="replay this many runs at once")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    ap.add_argument("--results", help="JSON-lines file of judged runs: runs in it are not replayed again, new ones "
                                      "are appended (a corpus measured in parts)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    truths = sorted(data.glob("*.truth.json"))
    if args.only:
        truths = [t for t in truths if t.name[: -len(".truth.json")] in args.only.split(",")]
    if not truths:
        print(f"error: --data {data}: no <run>.truth.json files; write them with "
              "benchmarks/verl_real_runs_writer.py --set signals", file=sys.stderr)
        return 2
    started = time.time()
    cache = Path(args.results) if args.results else None
    done = {}
    if cache is not None and cache.exists():
        done = {r["run"]: r for r in map(json.loads, cache.read_text().splitlines()) if r.get("run")}
    work = [(str(data), str(t)) for t in truths if t.name[: -len(".truth.json")] not in done]
    results = [done[t.name[: -len(".truth.json")]] for t in truths if t.name[: -len(".truth.json")] in done]
    with Pool(max(1, args.jobs)) as pool:
        for r in pool.imap_unordered(judge, work):
            results.append(r)
            if cache is not None:
                with cache.open("a") as fh:
                    fh.write(json.dumps(r) + "\n")
    for r in results:
        if args.json:
            print(json.dumps(r))
        elif r["false_pages"] or (r["fault"] != "healthy" and r["above_boundary"] and not r.get("in_deadline")):
            print(f"{r['run']:45s} false={r['false_pages']} paged_by={r.get('paged_by')} delay={r.get('delay_steps')}")
    summary = summarise(results)
    summary["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
