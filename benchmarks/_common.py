"""Shared plumbing of the detection-quality benchmarks: data location, rule profiles, output."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py`: make the repo's packages importable
    sys.path.insert(0, str(ROOT))

from monitor.detectors import registry  # noqa: E402
from monitor.detectors.anomaly import RareValueDetector  # noqa: E402
from monitor.rules import Rule, RuleError, load_rules  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "datasets"


def ensure_detector_types() -> None:
    """Register the detectors this area adds, if the shared registry does not list them yet."""
    registry.DETECTORS.setdefault("rare_value", RareValueDetector)


def load_profile(path: Path) -> list[Rule]:
    ensure_detector_types()
    try:
        return load_rules(path)
    except RuleError as exc:
        raise SystemExit(_fail(str(exc))) from None


def data_dir(arg: str | None, sub: str) -> Path:
    base = Path(arg) if arg else DEFAULT_DATA
    d = base / sub
    if not d.is_dir():
        raise SystemExit(_fail(f"--data {base}: no '{sub}' folder there; pass --data DIR holding {sub}/"))
    return d


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=False), flush=True)
