"""The alert catalogue (``alerting/catalogue.yaml``): the one list of alerts, their severities and
headline conditions. The webhook severity map and the README table are generated from it; the monitor's
default rules and the Prometheus alert rules are checked against it (``tests/test_alert_catalogue.py``).

    python -m alerting.catalogue --readme README.md     # rewrite the README's catalogue table
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from alerting.durations import parse_duration

PATH = Path(__file__).with_name("catalogue.yaml")
README_BEGIN = "<!-- alert catalogue: generated from alerting/catalogue.yaml -->"
README_END = "<!-- end of alert catalogue -->"
# the detector parameter that carries a condition's `threshold`, per monitor detector type
THRESHOLD_KEY = {
    "threshold": "value", "value_age": "max_age", "staleness": "max_gap", "counter_increase": "min_increase",
    "window_drop": "min_relative_drop", "leak": "min_slope_per_min", "drift": "alpha",
    "level_shift": "min_relative_shift", "baseline_ratio": "ratio", "context_anomaly": "threshold",
    "ks_shift": "alpha", "counter_stall": "window", "exhaustion": "horizon", "step_overrun": "min_s",
    "run_reference": "ratio",
}
# thresholds that are durations
DURATION_DETECTORS = {"value_age", "staleness", "counter_stall", "exhaustion", "step_overrun"}


@dataclass(frozen=True)
class CatalogueCondition:
    metric: str
    detector: str
    threshold: float
    window: float | None = None   # seconds
    for_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class CatalogueAlert:
    name: str
    severity: str
    condition: CatalogueCondition
    summary: str
    runbook: str

    def summary_text(self) -> str:
        """``summary`` with its ``{threshold}``, ``{threshold:%}``, ``{threshold:min}``, ``{window}`` and
        ``{for}`` filled in from the condition (str.format would trip over PromQL braces in the text)."""
        c = self.condition
        values = {"threshold": _human(c.raw["threshold"]), "threshold:%": f"{c.threshold * 100:g} %",
                  "threshold:min": f"{c.threshold / 60:g} min", "window": _human(c.raw.get("window")),
                  "for": _human(c.raw.get("for"))}
        return re.sub(r"\{(threshold(?::%|:min)?|window|for)\}", lambda m: values[m.group(1)], self.summary)


def _human(value: Any) -> str:
    if isinstance(value, str):
        m = re.fullmatch(r"(\d+)([smh])", value)
        if m:
            return f"{m.group(1)} {'min' if m.group(2) == 'm' else m.group(2)}"
        return value
    return "" if value is None else f"{value:g}"


def _seconds_or_number(value: Any, where: str) -> float:
    return parse_duration(value, where) if isinstance(value, str) else float(value)


@cache
def load(path: Path = PATH) -> tuple[CatalogueAlert, ...]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for i, a in enumerate(doc["alerts"]):
        c = a["condition"]
        where = f"{path.name}: alerts[{i}] ({a['name']})"
        out.append(CatalogueAlert(
            a["name"], a["severity"],
            CatalogueCondition(c["metric"], c["detector"], _seconds_or_number(c["threshold"], where),
                      parse_duration(c["window"], where) if "window" in c else None,
                      parse_duration(c.get("for", 0), where), raw=dict(c)),
            a["summary"], a["runbook"]))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: an alert name appears twice")
    return tuple(out)


def severities() -> dict[str, str]:
    """alertname -> severity: the map the Alertmanager webhook receiver applies."""
    return {a.name: a.severity for a in load()}


def readme_table() -> str:
    rows = ["| alert | sev | fires on | first thing to do |", "|---|---|---|---|"]
    rows += [f"| {a.name} | {a.severity} | {a.summary_text()} | {a.runbook} |" for a in load()]
    return "\n".join([README_BEGIN, *rows, README_END])


def replace_readme_table(text: str) -> str:
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    return text[:start] + readme_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="print the alert catalogue table, or rewrite it in a README")
    p.add_argument("--readme", type=Path, help="rewrite the table between the catalogue markers of this file")
    args = p.parse_args(argv)
    if args.readme is None:
        print(readme_table())
        return 0
    try:
        args.readme.write_text(replace_readme_table(args.readme.read_text(encoding="utf-8")), encoding="utf-8")
    except ValueError:
        print(f"catalogue: error: {args.readme} has no '{README_BEGIN}' ... '{README_END}' markers", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
