"""The measured evidence a diagnosis reads, as data: captured by the monitor where the series are and
written by the monitor's alert book into the transition log (``alerting.translog``, ``to_record``) in the
same transaction as the transitions it explains, so alerting never reads the monitor's store or its API.

``Evidence`` holds copies of the recent windows of the series the diagnosis procedures name
(``alerting.procedures.EVIDENCE_SERIES``) on the nodes of the firing alerts, the NaN/Inf sample times the
store refused, and each node's ``verl_config_info`` labels, all as of ``taken_at``. Its questions
(``EvidenceReader``) are answered from those copies; tests build one from arrays. Every answer carries
the series name and labels it came from, so a sentence can cite its source.

``match`` selects series by exact label values; ``node`` is matched against the series' ``node`` label
(the one the alert carries). Where several series match, the reader answers for the most recently
updated one (``readings`` gives all of them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

MAX_TREND_POINTS = 240  # Theil-Sen is O(n^2): a long window is thinned evenly to this many samples


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


@dataclass(frozen=True)
class SeriesWindow:
    """A copy of one series' recent samples (times ascending)."""

    name: str
    labels: dict[str, str]
    t: np.ndarray
    v: np.ndarray

    @property
    def node(self) -> str:
        return self.labels.get("node", "unknown")

    def lineage(self) -> tuple[int, int] | None:
        """(the history this window was copied from, how many samples it keeps) for a window that the next
        capture of the same history extends (``alerting.evidence_log``); None: a copy on its own."""
        return None

    def after(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Its samples newer than ``t``."""
        i = int(np.searchsorted(self.t, t, side="right"))
        return self.t[i:], self.v[i:]


@dataclass(frozen=True)
class NonFiniteTimes:
    """When one series' samples were NaN/Inf (the store never keeps them, yet "reward mean is NaN" is
    evidence)."""

    name: str
    labels: dict[str, str]
    times: tuple[float, ...]


@dataclass(frozen=True)
class Evidence:
    """What the monitor measured at ``taken_at`` (``Evidence(t)`` alone: nothing measured, so a diagnosis
    says what is missing instead of guessing); answers ``EvidenceReader``'s questions from its copies."""

    taken_at: float = 0.0
    series: tuple[SeriesWindow, ...] = ()
    nonfinite_times: tuple[NonFiniteTimes, ...] = ()
    config: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> verl_config_info labels

    def now(self) -> float:
        return self.taken_at

    def _series(self, name: str, node: str | None, match: dict[str, str] | None) -> list[SeriesWindow]:
        found = [s for s in self.series if s.name == name and len(s.t) and (node is None or s.node == node)
                 and all(s.labels.get(k) == v for k, v in (match or {}).items())]
        return sorted(found, key=lambda s: -float(s.t[-1]))

    @staticmethod
    def _reading(s: SeriesWindow, value: float, t: float) -> Reading:
        return Reading(s.name, dict(s.labels), float(value), float(t))

    def latest(self, name: str, node: str | None = None, match: dict[str, str] | None = None) -> Reading | None:
        found = self._series(name, node, match)
        return self._reading(found[0], found[0].v[-1], found[0].t[-1]) if found else None

    def readings(self, name: str, node: str | None = None,
                 match: dict[str, str] | None = None) -> list[Reading]:
        return [self._reading(s, s.v[-1], s.t[-1]) for s in self._series(name, node, match)]

    def at(self, name: str, t: float, node: str | None = None,
                match: dict[str, str] | None = None) -> Reading | None:
        for s in self._series(name, node, match):
            i = int(np.searchsorted(s.t, t, side="right")) - 1
            if i >= 0:
                return self._reading(s, s.v[i], s.t[i])
        return None

    def median(self, name: str, t0: float, t1: float, node: str | None = None,
               match: dict[str, str] | None = None) -> Reading | None:
        for s in self._series(name, node, match):
            vs = s.v[(s.t >= t0) & (s.t <= t1)]
            if vs.size:
                return self._reading(s, float(np.median(vs)), t1)
        return None

    def held_since(self, name: str, node: str | None = None, match: dict[str, str] | None = None,
                   tolerance: float = 1e-9) -> Reading | None:
        found = self._series(name, node, match)
        if not found:
            return None
        ts, vs = found[0].t, found[0].v
        last = vs[-1]
        differs = np.flatnonzero(np.abs(vs - last) > tolerance * max(1.0, abs(last)))
        i = int(differs[-1]) + 1 if differs.size else 0
        return self._reading(found[0], vs[i], ts[i])

    def trend(self, name: str, window_s: float, node: str | None = None,
              match: dict[str, str] | None = None) -> Trend | None:
        found = self._series(name, node, match)
        if not found:
            return None
        s = found[0]
        keep_from = s.t >= s.t[-1] - window_s
        ts, vs = s.t[keep_from], s.v[keep_from]
        if ts.size < 5:
            return None
        if ts.size > MAX_TREND_POINTS:
            keep = np.linspace(0, ts.size - 1, MAX_TREND_POINTS).astype(int)
            ts, vs = ts[keep], vs[keep]
        x = ts - ts[0]
        if np.ptp(vs) == 0:  # a flat series: theilslopes' interval would be degenerate anyway
            slope = lo = hi = 0.0
            intercept = float(vs[0])
        else:
            from scipy.stats import theilslopes  # ~72 MiB: loaded by the first trend a diagnosis asks for

            slope, intercept, lo, hi = (float(v) for v in theilslopes(vs, x, 0.95))
        return Trend(s.name, dict(s.labels), slope, lo, hi, int(ts.size), float(ts[0]), float(ts[-1]),
                     intercept, intercept + slope * float(x[-1]))

    def nonfinite(self, name: str, since: float, node: str | None = None) -> NonFinite | None:
        for nf in self.nonfinite_times:
            if nf.name != name or (node is not None and nf.labels.get("node", "unknown") != node):
                continue
            recent = [t for t in nf.times if t >= since]
            if recent:
                return NonFinite(name, dict(nf.labels), len(recent), recent[0], recent[-1])
        return None


def to_record(ev: Evidence) -> bytes:
    """``ev`` as one row of the transition log: a JSON header (names, labels, lengths), a newline, then the
    samples as raw little-endian float64 (JSON or base64 text of ~90 000 floats costs the writer, the
    monitor's evaluation thread, several times the milliseconds)."""
    arrays = [np.ascontiguousarray(a, dtype="<f8") for s in ev.series for a in (s.t, s.v)]
    head = {"taken_at": ev.taken_at, "config": ev.config,
            "series": [[s.name, s.labels, int(np.size(s.t)), int(np.size(s.v))] for s in ev.series],
            "nonfinite": [[n.name, n.labels, list(n.times)] for n in ev.nonfinite_times]}
    return json.dumps(head).encode() + b"\n" + b"".join(a.tobytes() for a in arrays)


def labels_of(doc: Any) -> dict[str, str]:
    return {str(k): str(x) for k, x in dict(doc).items()}


def from_record(record: Any) -> Evidence:
    """The evidence a row holds; ValueError/TypeError/KeyError when it does not parse (a row edited by hand)."""
    if not isinstance(record, bytes):
        raise TypeError(f"a {type(record).__name__}, not an evidence row")
    head, _, body = record.partition(b"\n")
    return from_parts(json.loads(head), body)


def from_parts(doc: dict[str, Any], body: bytes) -> Evidence:
    """A whole row from its parsed JSON head and its samples (``from_record``; a follower that read the
    head already, ``alerting.evidence_log.fold``)."""
    samples = np.frombuffer(body, dtype="<f8") if len(body) % 8 == 0 else None
    if samples is None:
        raise ValueError(f"{len(body)} bytes of samples: not whole float64s")
    series, at = [], 0
    for name, labels, nt, nv in doc["series"]:
        if nt != nv or nt < 0 or at + 2 * nt > samples.size:
            raise ValueError(f"series {name}: {nt} times, {nv} values, {samples.size - at} samples left")
        ts, vs = samples[at:at + nt].copy(), samples[at + nt:at + 2 * nt].copy()
        series.append(SeriesWindow(str(name), labels_of(labels), ts, vs))
        at += 2 * nt
    return with_head(doc, tuple(series))


def with_head(doc: dict[str, Any], series: tuple[SeriesWindow, ...]) -> Evidence:
    """``series`` as the Evidence of a row whose head is ``doc`` (its time, NaN/Inf times and config)."""
    bad = tuple(NonFiniteTimes(str(name), labels_of(labels), tuple(float(t) for t in times))
                for name, labels, times in doc["nonfinite"])
    config = {str(n): labels_of(i) for n, i in dict(doc["config"]).items()}
    return Evidence(float(doc["taken_at"]), series, bad, config)
