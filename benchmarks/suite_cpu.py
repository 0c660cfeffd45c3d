"""Where the test suite's CPU goes: a pytest plugin that writes each test's CPU seconds, and a summary.

On 2 shared cores the suite is CPU-bound and its wall time moves with the neighbours' load (a test's
``--durations`` figure was 3-5x its CPU on 2026-12-06's loaded machine), so per-test CPU is the figure to
compare before and after a change. Counted: the test process's own CPU over the test (setup, call and
teardown) plus the CPU of the children it reaped meanwhile (trainers, monitors, torchrun ranks; a
module-scoped fixture's processes are counted at the test that tears it down).

    CPU_PROFILE=/tmp/cpu.jsonl .venv/bin/python -m pytest -n 4 --dist loadfile -p benchmarks.suite_cpu
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl [--top 25] [--json]
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl --timeline   # each file's span on its worker
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    out = os.environ.get("CPU_PROFILE")
    own0, kids0 = _cpu()
    wall0, start = time.monotonic(), time.time()
    yield
    if out:
        own1, kids1 = _cpu()
        # worker and epoch start/end place each test on the run's timeline: with --dist loadfile a long file
        # handed out late sets the end of the run whatever the total CPU
        with open(out, "a", encoding="utf-8") as f:  # one line per test: xdist workers append side by side
            f.write(json.dumps({"id": item.nodeid, "self": round(own1 - own0, 3), "children": round(kids1 - kids0, 3),
                                "wall": round(time.monotonic() - wall0, 3),
                                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                "start": round(start, 3), "end": round(time.time(), 3)}) + "\n")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    files: dict[str, dict[str, float]] = defaultdict(lambda: {"cpu_s": 0.0, "children_s": 0.0, "wall_s": 0.0})
    for r in rows:
        f = files[r["id"].split("::")[0]]
        f["cpu_s"] += r["self"] + r["children"]
        f["children_s"] += r["children"]
        f["wall_s"] += r["wall"]
    ranked = sorted(files.items(), key=lambda kv: -kv[1]["cpu_s"])
    return {"tests": len(rows), "cpu_s": round(sum(f["cpu_s"] for f in files.values()), 1),
            "files": [{"file": name, **{k: round(v, 1) for k, v in f.items()}} for name, f in ranked]}


def timeline(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each file's span per worker, in start order: which file ran last on which worker sets the end."""
    spans: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if "start" not in r:
            continue  # a profile written before the plugin recorded times
        key = (r["worker"], r["id"].split("::")[0])
        s = spans.setdefault(key, [r["start"], r["end"]])
        s[0], s[1] = min(s[0], r["start"]), max(s[1], r["end"])
    if not spans:
        return []
    t0 = min(s[0] for s in spans.values())
    return [{"worker": w, "file": f, "start_s": round(s[0] - t0, 1), "end_s": round(s[1] - t0, 1),
             "span_s": round(s[1] - s[0], 1)} for (w, f), s in sorted(spans.items(), key=lambda kv: kv[1][0])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="the JSONL file the plugin wrote (CPU_PROFILE)")
    ap.add_argument("--top", type=int, default=25, help="files to list (default 25)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--timeline", action="store_true",
                    help="list each file's span per worker in start order instead (the run's critical path)")
    args = ap.parse_args(argv)
    path = Path(args.profile)
    if not path.is_file():
        print(f"suite_cpu: {path}: no such file; run pytest with CPU_PROFILE={path} -p benchmarks.suite_cpu first",
              file=sys.stderr)
        return 2
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        summary = summarise(rows)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"suite_cpu: {path}: not this plugin's output ({exc})", file=sys.stderr)
        return 2
    if args.timeline:
        spans = timeline(rows)
        if args.json:
            print(json.dumps(spans, indent=2))
            return 0
        for t in spans:
            print(f"{t['worker']:>5} {t['start_s']:7.1f} -> {t['end_s']:7.1f} ({t['span_s']:6.1f} s)  {t['file']}")
        return 0
    summary["files"] = summary["files"][:args.top]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{summary['tests']} tests, {summary['cpu_s']} CPU-s")
    for f in summary["files"]:
        print(f"{f['cpu_s']:8.1f} CPU-s ({f['children_s']:7.1f} in children) {f['wall_s']:8.1f} s wall  {f['file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
