"""Shared plumbing of the detection-quality benchmarks: data location, rule profiles, output."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py`: make the repo's packages importable
    sys.path.insert(0, str(ROOT))

from monitor.evaluation.rules import Rule, RuleError, load_rules  # noqa: E402

# not in the repository (benchmarks/DATASETS.md): $VERL_OPS_DATASETS, else beside the clone
DEFAULT_DATA = Path(os.environ.get("VERL_OPS_DATASETS") or ROOT.parent / "shared" / "datasets")


def load_profile(path: Path) -> list[Rule]:
    """A rules file in the monitor's format; bad input ends the benchmark with one line, exit 2."""
    try:
        return load_rules(path)
    except RuleError as exc:
        raise SystemExit(fail(str(exc))) from None


def data_dir(arg: str | None, sub: str) -> Path:
    base = Path(arg) if arg else DEFAULT_DATA
    d = base / sub
    if not d.is_dir():
        raise SystemExit(fail(f"--data {base}: no '{sub}' folder there; pass --data DIR holding {sub}/"))
    return d


def fail(message: str) -> int:
    """One line on stderr; returns the exit status for bad input (2)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=False), flush=True)
