"""The failure families that kill verl runs, on runs written by verl 0.9.1's own code, replayed live (issue 32).

    .venv/bin/python benchmarks/verl_families.py [--data benchmarks/data/verl_real2] [--only a,b] [--json]

The data (``<run>.jsonl.gz`` + ``<run>.truth.json``) comes from ``benchmarks/verl_real_runs_writer.py --set
families`` (benchmarks/verl_real_runs_families.py): entropy collapse and explosion, responses run to the length
cap (also in verl's V1 layout), finite gradient-norm bursts with loss divergence, reward hacking (training score
up, validation down), KL blow-up with the penalty on, a 30-min hang inside ``update_actor``; and healthy runs
whose responses grow x1.9, whose peak memory ratchets up in the first 25 steps, that resume from a checkpoint
(repeated steps, the log truncated as verl's ``FileLogger`` does), that change cadence, or that carry verl's V1
``response_length/clip_ratio`` bug (issue 7817: never 0). PPO, GRPO, REINFORCE++ and RLOO; 20 s to 1 h steps.

Each run is replayed as ``benchmarks/verl_runs_real.py`` replays one (line by line at its true time, tailed by
``JsonlTail`` into the daemon's ``Pipeline`` with the default rules) and judged from its truth file:

- a fault is paged (P0-P2) by an alert about it (the truth's ``alerts``, ``*`` globs) within its deadline --
  ``deadline_steps`` records after the onset step's record, or for a hang ``deadline_s`` seconds after it
  began -- and from that page until the fault ends (the end step's record, or the end of the run; a hang:
  until its step's record arrives) some alert about it is firing at every moment (a burst alert may resolve
  while the divergence alert it led to holds), and none resolves and pages again (no resolve-and-re-page);
- any other P0-P2 alert, or one about the fault before its onset, is a false page; a healthy run has none.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.verl_runs_real import PAGES, simulate
from monitor.evaluation.rules import load_rule_files

DATA = Path(__file__).parent / "data" / "verl_real2"


def about(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def fault_window(truth: dict) -> tuple[float | None, float]:
    """(start, end) of the fault in seconds: the onset step's record (a hang: inside that step) to the end
    step's record or the end of the run."""
    times = truth["times"]
    onset, end = truth.get("onset_step"), truth.get("end_step")
    if onset is None:
        return None, times[-1]
    if truth.get("fault_start_t") is not None:
        return truth["fault_start_t"], times[onset - 1]
    index = step_index(truth, onset)
    end_t = times[step_index(truth, end)] if end else times[-1]
    return times[index], end_t


def step_index(truth: dict, step: int) -> int:
    """Index in ``times`` of a step's (last) record: after a resume, steps repeat."""
    restart = truth.get("restart_index")
    if restart is None or step <= truth["steps"] - (len(truth["times"]) - restart):
        return step - 1
    return restart + step - (truth["steps"] - (len(truth["times"]) - restart)) - 1


def held(events: list[tuple[float, dict]], patterns: list[str], start: float, end: float) -> tuple[list[str], list[str]]:
    """While the fault lasts (from the first page about it to ``end``): the alerts whose resolving left no
    alert about the fault firing, and those that resolved and paged again (a re-page)."""
    firing: dict[str, bool] = {}
    gaps: list[str] = []
    repaged: list[str] = []
    for t, r in events:
        labels = r.get("labels", {})
        if not (start <= t < end and labels.get("severity") in PAGES and about(labels.get("alertname", ""), patterns)):
            continue
        fp = r["fingerprint"]
        if r.get("status") == "firing":
            if fp in firing and not firing[fp]:
                repaged.append(labels["alertname"])
            firing[fp] = True
        elif r.get("status") == "resolved" and firing.get(fp):
            firing[fp] = False
            if not any(firing.values()):
                gaps.append(labels["alertname"])
    return sorted(set(gaps)), sorted(set(repaged))


def score(truth: dict, events: list[tuple[float, dict]]) -> dict:
    times = truth["times"]
    patterns = truth.get("alerts") or []
    start, end = fault_window(truth)
    firing = [(t, r) for t, r in events if r.get("status") == "firing"
              and r["labels"].get("severity") in PAGES]
    about_fault = [(t, r) for t, r in firing if start is not None and t >= start
                   and about(r["labels"]["alertname"], patterns)]
    false = sorted({r["labels"]["alertname"] for t, r in firing if (t, r) not in about_fault})
    out: dict = {"run": truth["run"], "fault": truth["fault"], "variant": truth.get("variant"),
                 "algo": truth["algo"], "step_s": truth["step_s"], "false_pages": false,
                 "unusual_p3": sum(r["labels"]["alertname"] == "UnusualTrainingMetric" for _, r in events
                                   if r.get("status") == "firing")}
    ok = not false
    if start is not None:
        hit = about_fault[0] if about_fault else None
        out["paged_by"] = hit[1]["labels"]["alertname"] if hit else None
        if truth.get("deadline_s") is not None:
            out["delay_s"] = round(hit[0] - start, 1) if hit else None
            out["in_deadline"] = hit is not None and hit[0] - start <= truth["deadline_s"] and hit[0] <= end
        else:
            out["delay_steps"] = sum(1 for x in times if start <= x <= hit[0]) if hit else None
            out["in_deadline"] = hit is not None and out["delay_steps"] <= truth["deadline_steps"]
        gaps, repaged = held(events, patterns, start, end)
        out["uncovered_after"] = gaps
        out["repaged"] = repaged
        ok = ok and bool(out["in_deadline"]) and not gaps and not repaged
        if hit is not None:
            out["evidence"] = hit[1].get("annotations", {}).get("summary", "")
    out["ok"] = ok
    return out


def replay(data: Path, truth: dict) -> list[tuple[float, dict]]:
    lines = gzip.decompress((data / f"{truth['run']}.jsonl.gz").read_bytes()).splitlines(keepends=True)
    with tempfile.TemporaryDirectory(prefix="verl-families-") as tmp:
        return simulate(lines, truth["times"], truth["step_s"], RULES, Path(tmp), None,
                        truncate_at=truth.get("restart_index"), total_steps=truth["steps"])


RULES = load_rule_files(None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="folder of <run>.jsonl.gz + <run>.truth.json")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--verbose", action="store_true", help="also print every alert transition")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args(argv)
    data = Path(args.data)
    truths = sorted(data.glob("*.truth.json"))
    if not truths:
        print(f"error: --data {data}: no <run>.truth.json files; write them with "
              "benchmarks/verl_real_runs_writer.py --set families", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    results = []
    started = time.process_time()
    for tp in truths:
        truth = json.loads(tp.read_text())
        if only and truth["run"] not in only:
            continue
        events = replay(data, truth)
        r = score(truth, events)
        results.append(r)
        for t, rec in events if args.verbose else []:
            if rec.get("kind") == "alert":
                step = sum(1 for x in truth["times"] if x <= t)
                print(f"  step {step:4d} {rec['status']:8s} {rec['labels']['alertname']} {rec['labels'].get('severity')} "
                      f"{rec.get('annotations', {}).get('summary', '') if rec['status'] == 'firing' else ''}")
        delay = r.get("delay_steps", r.get("delay_s"))
        print(json.dumps(r) if args.json else
              f"{r['run']:32s} ok={r['ok']!s:5s} by={r.get('paged_by')} delay={delay} "
              f"uncovered={r.get('uncovered_after')} repaged={r.get('repaged')} false={r['false_pages']}", flush=True)
    summary = {"benchmark": "verl_families", "runs": len(results), "ok": sum(r["ok"] for r in results),
               "failed": [r["run"] for r in results if not r["ok"]],
               "faults_ok": sum(r["ok"] for r in results if r["fault"] != "healthy"),
               "faults": sum(r["fault"] != "healthy" for r in results),
               "healthy_quiet": sum(not r["false_pages"] for r in results if r["fault"] == "healthy"),
               "healthy": sum(r["fault"] == "healthy" for r in results),
               "false_pages": sum(len(r["false_pages"]) for r in results),
               "cpu_s": round(time.process_time() - started, 1)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
