"""The training-signal catalogue (monitor/rules/signals.yaml) and the rules it generates.

Each catalogued key with a ``judge:`` becomes one rule of the default rules: a ``run_reference`` detector
on the key's series in a verl log (monitor/detectors/run_reference.py), raising the entry's alert with the
entry's config keys in its runbook. Every other numeric series of a verl log gets the ``uncatalogued``
change-point rule (P3), so a key verl adds in a new release is read from its first run. An alert on a new
key is one entry here (plus its alert in alerting/catalogue.yaml when the alert is new).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from alerting.model import SEVERITIES
from alerting.safe_config import load_yaml_file
from monitor.errors import MonitorConfigError
from monitor.sources.verl_keys import map_key

PATH = Path(__file__).parents[1] / "rules" / "signals.yaml"
JOB = "verl_jsonl"
UNMAPPED_PREFIX = "verl_jsonl_"  # verl_keys.unknown_name
DIRECTIONS = {"up", "down"}
TRENDS = {"up", "down", "none"}
# a judge on a direction healthy runs also trend in must ask for a factor, not a slope
MIN_TREND_RATIO = 4.0


class SignalCatalogueError(MonitorConfigError):
    """One line naming the catalogue file, the entry and the key to fix."""


@dataclass(frozen=True)
class Signal:
    key: str
    bad: tuple[str, ...]
    trend: str
    severity: str
    alert: str
    judge: dict[str, Any] = field(default_factory=dict)
    watched_by: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    summary: str = ""

    @property
    def series(self) -> str:
        mapped = map_key(self.key)
        assert mapped is not None  # every metric key maps (verl_keys.map_key)
        return mapped.name

    def selector(self) -> str:
        mapped = map_key(self.key)
        assert mapped is not None
        labels = {**mapped.labels, "job": JOB}
        return mapped.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass(frozen=True)
class SignalCatalogue:
    signals: tuple[Signal, ...]
    defaults: dict[str, Any]
    not_signals: tuple[str, ...]
    not_signal_series: tuple[str, ...]
    not_signal_prefixes: tuple[str, ...]
    uncatalogued: dict[str, Any]

    def catalogued_series(self) -> set[str]:
        return {s.series for s in self.signals} | {m.name for k in self.not_signals if (m := map_key(k))}

    def rule_dicts(self) -> list[dict[str, Any]]:
        """The default rules this catalogue generates, in monitor/rules/default.yaml's own form."""
        out = [_judged_rule(s, self.defaults) for s in self.signals if s.judge]
        skip = sorted(self.catalogued_series() | set(self.not_signal_series))
        prefixes = "|".join(re.escape(p) + ".*" for p in self.not_signal_prefixes)
        names = "|".join(re.escape(n) for n in skip)
        unc = self.uncatalogued
        out.append({
            "alert": unc["alert"], "severity": unc["severity"], "labels": {"signal": "$__name__"},
            # verl's keys the source did not map (verl_jsonl_<key>); the source's own series (liveness, the
            # running step, checkpoints) are not training signals
            "select": f'{{job="{JOB}",__name__=~"{UNMAPPED_PREFIX}.*",__name__!~"{names}|{prefixes}"}}',
            "detector": _detector(self.defaults, unc["judge"]),
            "summary": "{{ labels.signal }} on {{ labels.node }} (a verl key no catalogue entry names) "
                       "moved {{ details.before | round(4) }} -> {{ details.after | round(4) }} against the run's own "
                       "reference; watched so a new verl key is never unread",
            "runbook": "Look up the key in verl's source; if it matters, give it an entry in monitor/rules/signals.yaml "
                       "(its bad direction, healthy trend, severity and config keys).",
        })
        return out


def _detector(defaults: dict[str, Any], judge: dict[str, Any]) -> dict[str, Any]:
    """The rule's detector: the warm-up is the rule's (``warmup_steps``), not the detector's, so the series'
    ring reserves the few samples its step time is measured from. (At ~1-h steps a series unseen for an hour
    before 4 samples gave it an interval lives by its source's cadence, young keys' first gaps included:
    monitor/series/store.py's evict_stale.)"""
    params = {**defaults, **judge}
    warmup = int(params.pop("warmup", 0))
    return {"type": "run_reference", **params, "warmup": 0, "warmup_steps": warmup}


def _judged_rule(s: Signal, defaults: dict[str, Any]) -> dict[str, Any]:
    direction = s.judge.get("direction") or ("both" if len(s.bad) > 1 else s.bad[0])
    config = ", ".join(s.config) or "none"
    return {
        "alert": s.alert, "severity": s.severity, "select": s.selector(),
        "detector": _detector(defaults, {**s.judge, "direction": direction}),
        "summary": (f"{s.key} on {{{{ labels.node }}}} {{{{ 'fell' if details.direction < 0 else 'rose' }}}} "
                    "{{ details.before | round(4) }} -> {{ details.after | round(4) }} "
                    "(x{{ details.factor | round(1) if details.factor >= 1 else (1 / details.factor) | round(1) }} "
                    "against the run's own reference: its early steps or the steps before)"),
        "runbook": f"{s.summary}. verl config to turn: {config}.",
    }


def _entry(raw: Any, where: str) -> Signal:
    if not isinstance(raw, dict) or not isinstance(raw.get("key"), str):
        raise SignalCatalogueError(f"{where}: expected a mapping with key, bad, trend, severity, alert")
    where = f"{where} ({raw['key']})"
    bad = raw.get("bad")
    if not isinstance(bad, list) or not bad or not set(bad) <= DIRECTIONS:
        raise SignalCatalogueError(f"{where}.bad: expected a list of up/down, got {bad!r}")
    if raw.get("trend") not in TRENDS:
        raise SignalCatalogueError(f"{where}.trend: expected one of up, down, none, got {raw.get('trend')!r}")
    if raw.get("severity") not in SEVERITIES:
        raise SignalCatalogueError(f"{where}.severity: expected one of {', '.join(SEVERITIES)}")
    if not isinstance(raw.get("alert"), str):
        raise SignalCatalogueError(f"{where}.alert: expected the alert name it raises")
    judge = raw.get("judge") or {}
    if not isinstance(judge, dict):
        raise SignalCatalogueError(f"{where}.judge: expected run_reference parameters")
    direction = judge.get("direction")
    judged = {direction} if direction in DIRECTIONS else set(bad)
    if judge and raw["trend"] in judged and judge.get("transform", "identity") == "identity" \
            and float(judge.get("ratio", 0)) < MIN_TREND_RATIO:
        raise SignalCatalogueError(f"{where}.judge.ratio: healthy runs trend it {raw['trend']}; "
                                   f"judge that direction with ratio >= {MIN_TREND_RATIO:g}")
    return Signal(raw["key"], tuple(bad), raw["trend"], raw["severity"], raw["alert"], dict(judge),
                  tuple(raw.get("watched_by") or ()), tuple(raw.get("config") or ()), str(raw.get("summary", "")))


@cache
def load(path: Path = PATH) -> SignalCatalogue:
    doc = load_yaml_file(path, "signal catalogue")
    if not isinstance(doc, dict) or not isinstance(doc.get("signals"), list):
        raise SignalCatalogueError(f"signal catalogue {path}: expected a top-level 'signals:' list")
    signals = tuple(_entry(r, f"{path}: signals[{i}]") for i, r in enumerate(doc["signals"]))
    unc = doc.get("uncatalogued") or {}
    if unc.get("severity") != "P3":
        raise SignalCatalogueError(f"{path}: uncatalogued.severity: a key nobody catalogued never pages; use P3")
    return SignalCatalogue(signals, dict(doc.get("defaults") or {}), tuple(doc.get("not_signals") or ()),
                           tuple(doc.get("not_signal_series") or ()), tuple(doc.get("not_signal_prefixes") or ()),
                           dict(unc))
