"""Where the test suite's CPU goes: a pytest plugin that writes each test's CPU seconds, and a summary.

On 2 shared cores the suite is CPU-bound and its wall time moves with the neighbours' load (a test's
``--durations`` figure was 3-5x its CPU on 2026-12-06's loaded machine), so per-test CPU is the figure to
compare before and after a change. Counted: the test process's own CPU over the test (setup, call and
teardown) plus the CPU of the children it reaped meanwhile (trainers, monitors, torchrun ranks; a
module-scoped fixture's processes are counted at the test that tears it down).

    CPU_PROFILE=/tmp/cpu.jsonl .venv/bin/python -m pytest -n 4 --dist loadfile -p benchmarks.suite_cpu
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl [--top 25] [--json]
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
    wall0 = time.monotonic()
    yield
    if out:
        own1, kids1 = _cpu()
        with open(out, "a", encoding="utf-8") as f:  # one line per test: xdist workers append side by side
            f.write(json.dumps({"id": item.nodeid, "self": round(own1 - own0, 3), "children": round(kids1 - kids0, 3),
                                "wall": round(time.monotonic() - wall0, 3)}) + "\n")


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="the JSONL file the plugin wrote (CPU_PROFILE)")
    ap.add_argument("--top", type=int, default=25, help="files to list (default 25)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
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
