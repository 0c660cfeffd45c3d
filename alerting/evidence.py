"""What the diagnosis stage may read about the present: an evidence-reader protocol.

``alerting`` never imports ``monitor``, yet the diagnosis (``alerting/diagnose.py``) needs the live series
(``verl_kl_coef`` now, reward mean 10 minutes ago, the buffer's trend). The monitor implements
``EvidenceReader`` over its series store (``monitor/evidence.py``) and hands it to the engine with
``AlertEngine.set_evidence``; tests implement it over a dict. Every answer carries the series name and
labels it came from, so a sentence can cite its source.

``match`` selects series by exact label values; ``node`` is matched against the series' ``node`` label
(the one the alert carries). Where several series match, the reader answers for the most recently
updated one (``readings`` gives all of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Reading:
    """One sample of one series."""

    name: str
    labels: dict[str, str]
    value: float
    t: float

    @property
    def source(self) -> str:
        """``name{k="v"}`` without the plumbing labels: what a sentence cites."""
        shown = {k: v for k, v in sorted(self.labels.items())
                 if k in ("gpu", "stage", "component", "reason", "outcome", "model")}
        inner = ",".join(f'{k}="{v}"' for k, v in shown.items())
        return f"{self.name}{{{inner}}}" if inner else self.name


@dataclass(frozen=True)
class Trend:
    """Robust (Theil-Sen) slope of one series over a window, with its 95 % confidence bounds."""

    name: str
    labels: dict[str, str]
    slope_per_s: float
    lo_per_s: float
    hi_per_s: float
    n: int
    t0: float
    t1: float
    first: float  # fitted values at t0 and t1 (robust to one wild sample)
    last: float

    @property
    def slope_per_min(self) -> float:
        return self.slope_per_s * 60.0

    @property
    def rising(self) -> bool:
        """Significantly upward: the lower confidence bound is above zero."""
        return self.lo_per_s > 0.0

    @property
    def source(self) -> str:
        return Reading(self.name, self.labels, self.last, self.t1).source


@dataclass(frozen=True)
class NonFinite:
    """Samples of a series that were NaN/Inf (the store never keeps them, the reader counts them)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    count: int = 0
    first_t: float = 0.0
    last_t: float = 0.0


class EvidenceReader(Protocol):
    def now(self) -> float: ...

    def latest(self, name: str, node: str | None = None, match: dict[str, str] | None = None) -> Reading | None:
        """The newest sample of the series."""

    def readings(self, name: str, node: str | None = None,
                 match: dict[str, str] | None = None) -> list[Reading]:
        """The newest sample of every matching series (e.g. one per GPU)."""

    def at(self, name: str, t: float, node: str | None = None,
           match: dict[str, str] | None = None) -> Reading | None:
        """The sample at or just before ``t`` (None when the series starts later)."""

    def median(self, name: str, t0: float, t1: float, node: str | None = None,
               match: dict[str, str] | None = None) -> Reading | None:
        """The median of the samples in [t0, t1] (a level robust to one wild sample; ``t`` = t1)."""

    def held_since(self, name: str, node: str | None = None, match: dict[str, str] | None = None,
                   tolerance: float = 1e-9) -> Reading | None:
        """The oldest kept sample of the run of values equal (within ``tolerance``) to the newest one:
        since when the current value has held. Its ``t`` is the oldest kept sample when the value held
        for the whole history the reader keeps."""

    def trend(self, name: str, window_s: float, node: str | None = None,
              match: dict[str, str] | None = None) -> Trend | None:
        """Theil-Sen slope over the last ``window_s`` seconds (None under 5 samples)."""

    def nonfinite(self, name: str, since: float, node: str | None = None) -> NonFinite | None:
        """NaN/Inf samples of the series since ``since`` (None when there were none)."""


class NoEvidence:
    """The reader when nothing was wired in: every question is answered 'not measured', so a diagnosis
    says what is missing instead of guessing."""

    def __init__(self, now: float = 0.0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def latest(self, name: str, node: str | None = None, match: dict[str, str] | None = None) -> Reading | None:
        return None

    def readings(self, name: str, node: str | None = None,
                 match: dict[str, str] | None = None) -> list[Reading]:
        return []

    def at(self, name: str, t: float, node: str | None = None,
           match: dict[str, str] | None = None) -> Reading | None:
        return None

    def median(self, name: str, t0: float, t1: float, node: str | None = None,
               match: dict[str, str] | None = None) -> Reading | None:
        return None

    def held_since(self, name: str, node: str | None = None, match: dict[str, str] | None = None,
                   tolerance: float = 1e-9) -> Reading | None:
        return None

    def trend(self, name: str, window_s: float, node: str | None = None,
              match: dict[str, str] | None = None) -> Trend | None:
        return None

    def nonfinite(self, name: str, since: float, node: str | None = None) -> NonFinite | None:
        return None
