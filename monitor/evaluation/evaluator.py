"""Evaluator: routes each stored sample to the detectors of the rules whose selectors match it,
and at each tick says which alert instances changed: became active, ready or inactive, or moved their start.

The tick costs what changed, not what fires: an instance that held at the last tick and has seen no
flip of its condition since (nor gone stale) is not looked at again -- it waits in a heap under the time
it could go stale, and a flip wakes it; the alert book keeps its state, reads its value from the binding
when asked (``binding_value``) and looks only at the fingerprints that changed or that nothing held at the
last tick. At 1000 GPUs with 627 alerts firing after 6 h, one candidate per firing alert per tick was most
of the tick, and walking the firing ones (here and in the book) most of a tick that moved none.

One *binding* = (rule, condition, series) with its own detector. The first condition of a rule is
the *primary*: each primary series is one alert instance (its labels become the alert's). Further
conditions (``when:``) are joined on the node (or the rule's ``join_on`` labels): the instance is active
only while every other condition has at least one active, fresh series on the same node.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from alerting.model import fingerprint
from monitor.detectors.base import Finding
from monitor.detectors.cadence import CadenceScaled
from monitor.detectors.work import WorkLog
from monitor.evaluation.history import samples_needed
from monitor.evaluation.instances import NOT_CALM, Binding, Candidate, Evaluation, binding_value
from monitor.evaluation.rules import SERIES_NAME_LABEL, Rule
from monitor.model import PLUMBING_LABELS
from monitor.series.store import Series

STALE_INTERVALS = 3.0
LONG_GAP_MARGIN = 1.5
EVICT_INTERVALS = 10.0
_UNBOUND: tuple[Binding, ...] = ()  # bindings of a series no rule matches
_FILL_CHECKS = frozenset({20, 200, 2000})  # sample counts at which a binding's window capacity is checked
# ... and at which its series' ring is sized again: from the 4th sample on its interval is known (from the
# 6th a step-cadence detector's own: ``cadence._GROW_AT``), and a per-step series' interval moves
_SIZE_CHECKS = frozenset({4, 6, 20, 200, 2000})


class Evaluator:
    def __init__(self, rules: list[Rule], cluster: str = "default", stale_after_s: float = 300.0,
                 reserve: Callable[[Series, float], None] | None = None) -> None:
        """``reserve(series, samples)``: give the series' ring room for the history its bindings read
        (``monitor.evaluation.history``; the pipeline caps it at the store's capacity). None: rings are left alone."""
        self.rules = rules
        self.reserve = reserve
        self.cluster = cluster
        self.stale_after_s = stale_after_s
        # series id -> its bindings, for the series some rule binds; every series also carries its own
        # (``Series.bound``, the empty tuple where none: ~37 000 of 56 000 at 1000 GPUs, not kept here)
        self._by_series: dict[int, Sequence[Binding]] = {}
        self._helpers: dict[tuple[int, int, tuple[str, ...]], list[Binding]] = defaultdict(list)
        self._ticking: list[Binding] = []
        self._hot: dict[int, Binding] = {}  # id(binding) -> primary binding that is or was just active
        # the hot ones the next tick looks at; the others are calm (``_calm_until``), each in ``_calm`` under
        # the time it must be looked at again (lazily deleted: an entry whose binding moved on is skipped), so
        # a tick walks what may have changed, not what fires
        self._awake: dict[int, Binding] = {}
        self._calm: list[tuple[float, int, Binding]] = []
        self._hot_seq = itertools.count()
        self._calm_seq = itertools.count()  # ties in the heap never compare bindings
        # fingerprint -> {id(binding): binding} given to the book (``said``), and what changed off the tick
        # (an evicted series' bindings): the next tick says so
        self._given: dict[str, dict[int, Binding]] = {}
        self._changed: set[str] = set()
        # taken back since the last tick (the book reads their parting value at the next), and those the
        # book has read: their parting is dropped at the tick after
        self._parted: list[Binding] = []
        self._read: list[Binding] = []
        # work that explains a memory peak's rise (a condition's explain_by, monitor/detectors/work.py): one
        # log per (rule, condition, node, job), fed by the work series, read by that rule's leak detectors
        self._explaining = [(ri, ci, c) for ri, r in enumerate(rules) for ci, c in enumerate(r.conditions) if c.explain_by]
        self._work_logs: dict[tuple[int, int, str, str], WorkLog] = {}
        self._work_feeds: dict[int, list[WorkLog]] = {}
        # called once per binding whose detector window cannot hold its minimum samples (the pipeline
        # logs it and sets verl_monitor_rule_window_unfillable)
        self.on_unfillable: Callable[[Binding, str], None] | None = None
        # for the pipeline's per-sample fast path (a scrape's known series): whether a series feeds a work
        # log, and the bindings of a series no rule matches (``series.bound``), without a call into ``observe``
        self.feeding = self._work_feeds
        self.unbound = _UNBOUND

    # -- binding ---------------------------------------------------------------------------------

    def bindings(self, series: Series) -> Sequence[Binding]:
        known = series.bound
        if known is not None:
            return known
        found: list[Binding] = []
        labels = series.labels  # built from the key on each read: once per series here
        for ri, rule in enumerate(self.rules):
            for ci, cond in enumerate(rule.conditions):
                if not cond.matches(series.name, labels):
                    continue
                b = Binding(rule, ri, ci, series,
                            cond.new_detector(self._work_log(ri, ci, labels) if cond.explain_by else None))
                if ci == 0:  # its alert labels and fingerprint: when it first goes active (``_identity``)
                    b.join = rule.join_key(labels)
                else:
                    self._helpers[(ri, ci, rule.join_key(labels))].append(b)
                if b.detector.ticks:
                    self._ticking.append(b)
                found.append(b)
        feeds = [self._work_log(ri, ci, labels) for ri, ci, c in self._explaining if c.explains(series.name, labels)]
        if feeds:
            self._work_feeds[series.id] = feeds
        # most series match no rule: they share one empty tuple (a list each was ~56 B x 40 000 series)
        series.bound = bound = found or _UNBOUND
        if found:
            self._by_series[series.id] = bound
            self._size(series, bound)
            for b in found:  # after the ring is sized: a detector replays from it only where it holds enough
                if isinstance(b.detector, CadenceScaled):
                    b.detector.replay_from(series)
        return bound

    def _work_log(self, ri: int, ci: int, labels: dict[str, str]) -> WorkLog:
        key = (ri, ci, labels.get("node", "unknown"), labels.get("job", ""))
        log = self._work_logs.get(key)
        if log is None:
            log = self._work_logs[key] = WorkLog()
        return log

    def _size(self, series: Series, bound: Sequence[Binding]) -> None:
        """Room in the series' ring for the longest history one of its bindings reads, at its interval."""
        if self.reserve is not None:
            interval = series.interval()
            self.reserve(series, max(max(samples_needed(b.rule, b.cond, interval), b.detector.history_samples)
                                     for b in bound))

    def alert_labels(self, rule: Rule, series_labels: dict[str, str], series_name: str = "") -> dict[str, str]:
        labels = {k: v for k, v in series_labels.items() if k not in PLUMBING_LABELS}
        # a rule over many series (no name in its selector) tells its alerts apart by the series' name
        labels.update({k: series_name if v == SERIES_NAME_LABEL else v for k, v in rule.labels.items()})
        labels.update(alertname=rule.alert, severity=rule.severity, cluster=self.cluster,
                      node=series_labels.get("node", "unknown"))
        return labels

    # -- streaming -------------------------------------------------------------------------------

    def observe(self, series: Series, t: float, value: float, seen: float | None = None) -> None:
        """``seen``: the scrape time, when the sample came from a scrape. Absence detectors (``ticks``)
        take it instead of the stamp: liveness comes from the scrape's success, never from stamps."""
        bound = series.bound
        if bound is None:
            bound = self.bindings(series)
        if self._work_feeds:
            for log in self._work_feeds.get(series.id, ()):
                log.add(series.id, t, value)
        for b in bound:
            detector = b.detector
            # counted before the update: whether a window can fill reads only the rule's parameters and
            # the series' interval, never what the detector holds
            b.samples += 1
            if b.samples in _FILL_CHECKS and b.unfillable is None:
                self._check_fill(b)
            at = seen if seen is not None and detector.ticks else t
            if not b.active and detector.quiet(at, value):
                # what ``update`` and ``record`` would leave: an inactive binding stays inactive (so
                # ``_held`` holds nothing), its finding and ``since`` None already; only the time moves
                b.last_t = t
                continue
            f = detector.update(at, value)
            if b.rule.keep_firing_for_steps:
                f = self._held(b, f, t)
            b.record(f, t, seen)
            if b.cond == 0 and (b.active or b.said is not None) and b.calm_until == NOT_CALM:
                self._wake(b)
        if bound and bound[0].samples in _SIZE_CHECKS:
            self._size(series, bound)

    def touch(self, series: Series, seen: float) -> None:
        """The series was in a successful scrape but its sample was refused (old, repeated or out-of-order
        stamp): its absence detectors still learn it is alive."""
        for b in series.bound or ():
            if b.detector.ticks:
                b.record(b.detector.update(seen, series.last_v), seen)

    def pinned(self, series: Series) -> bool:
        """An absence detector or an active alert depends on the series: the store must keep it."""
        return any(b.active or b.detector.ticks for b in series.bound or ())

    def forget(self, series: Series) -> None:
        """The store evicted the series: drop its bindings (their detectors' memory goes with them)."""
        labels = series.labels
        self._work_feeds.pop(series.id, None)
        bound = series.bound or ()
        series.bound = None
        self._by_series.pop(series.id, None)
        if any(b.detector.ticks for b in bound):  # only a removed target's are ever evicted
            self._ticking = [b for b in self._ticking if b.series is not series]
        for b in bound:
            self._hot.pop(id(b), None)
            self._awake.pop(id(b), None)
            if b.said is not None:
                self._take_back(b, self._changed)
            if b.cond:
                helpers = self._helpers.get((b.rule_index, b.cond, b.rule.join_key(labels)), [])
                if b in helpers:
                    helpers.remove(b)

    def evict_horizon(self, series: Series) -> float:
        """How long a series may go unseen before the store evicts it (and its detectors' memory): its
        freshness horizon, or ``EVICT_INTERVALS`` of its own intervals -- verl 0.6/0.7 write through an
        8 KB buffer, so a PPO run at 24-min steps delivers four records every ~1.6 h, and evicting its
        series between two bursts lost every window (ThroughputDrop never confirmed)."""
        return max(self.horizon(series), EVICT_INTERVALS * series.interval())

    def horizon(self, series: Series) -> float:
        """How long a series may go unseen and still count (the freshness horizon of its findings)."""
        return max(self.stale_after_s, STALE_INTERVALS * series.interval())

    def tick(self, now: float) -> Evaluation:
        for b in self._ticking:
            b.record(b.detector.tick(now), now)  # type: ignore[attr-defined]
            if b.cond == 0 and (b.active or b.said is not None) and b.calm_until == NOT_CALM:
                self._wake(b)
        for b in self._read:
            b.parting = None
        changed, self._changed = self._changed, set()
        given, hot, awake, calm = self._given, self._hot, self._awake, self._calm
        while calm and calm[0][0] <= now:
            until, _, b = heapq.heappop(calm)
            if self._still_calm(until, b):
                awake[id(b)] = b
        for key, b in list(awake.items()):
            since = self._joint_since(b, now)
            if since is None:
                del hot[key], awake[key]
                b.calm_until = NOT_CALM
                if b.said is not None:
                    self._take_back(b, changed)
                continue
            ready = now - since >= self._for_s(b)
            if b.said != (since, ready):
                if b.said is None:
                    if not b.fp:
                        self._identity(b)
                    given.setdefault(b.fp, {})[key] = b
                b.said = (since, ready)
                changed.add(b.fp)
            b.calm_until = self._calm_until(b, ready)
            if b.calm_until != NOT_CALM:
                del awake[key]
                heapq.heappush(calm, (b.calm_until, next(self._calm_seq), b))
        if len(calm) > 2 * len(hot) + 64:  # entries of bindings that woke or left since: drop them
            self._calm = [e for e in calm if self._still_calm(e[0], e[2])]
            heapq.heapify(self._calm)
        self._read, self._parted = self._parted, []
        if not changed:
            return Evaluation([], given, changed)
        # every binding of each changed instance (all given bindings are hot), in the order they became
        # hot: the book's transitions come out in it
        bound = sorted((b for fp in changed for b in given.get(fp, {}).values()), key=lambda b: b.hot_seq)
        return Evaluation([self._candidate(b, now) for b in bound], given, changed)

    def _still_calm(self, until: float, b: Binding) -> bool:
        """A heap entry (``until``, ``b``) still stands: ``b`` is hot and calm until then (it neither woke nor left)."""
        return b.calm_until == until and self._hot.get(id(b)) is b

    def _wake(self, b: Binding) -> None:
        """``b`` is active, or was given and its condition flipped: the next tick looks at it."""
        key = id(b)
        if key not in self._hot:
            b.hot_seq = next(self._hot_seq)
            self._hot[key] = b
        self._awake[key] = b

    def _calm_until(self, b: Binding, ready: bool) -> float:
        """Until when a given binding cannot change what the book was told without a flip of its condition
        (which ``record`` marks): a ready one of a single-condition rule while it is surely fresh. Others
        are looked at every tick (a pending one's ``for`` runs, a join's partners may go stale, a
        ``for_steps`` rule's duration moves with the series' interval)."""
        if not ready or len(b.rule.conditions) > 1 or b.rule.for_steps:
            return NOT_CALM
        return math.inf if b.detector.ticks else b.last_t + self.stale_after_s

    def _take_back(self, b: Binding, changed: set[str]) -> None:
        group = self._given.get(b.fp)
        if group is not None:
            group.pop(id(b), None)
            if not group:
                del self._given[b.fp]
        b.said = None
        changed.add(b.fp)
        self._parted.append(b)

    def _candidate(self, b: Binding, now: float) -> Candidate:
        since, ready = b.said  # type: ignore[misc]
        details = dict(b.finding.details) if b.finding else {}
        return Candidate(b.fp, b.labels, b.rule, since, ready, binding_value(b), details, b, self._joined(b, now))

    def _identity(self, b: Binding) -> None:
        """A primary binding's alert labels and fingerprint, made once, when it is first a candidate: kept
        from the binding on, a dict of ~10 labels and a fingerprint were ~300 B for each of ~12 000
        primary bindings at 1000 GPUs, most of which never fire."""
        b.labels = self.alert_labels(b.rule, b.series.labels, b.series.name)
        b.fp = fingerprint(b.labels)

    def _joined(self, b: Binding, now: float) -> tuple[dict, ...]:
        out = []
        for ci in range(1, len(b.rule.conditions)):
            h = next((h for h in self._helpers.get((b.rule_index, ci, b.join), []) if self._fresh(h, now)), None)
            if h is not None:
                details = dict(h.finding.details) if h.finding else {}
                out.append({"name": h.series.name, "labels": h.series.labels,
                            "value": details.get("value", h.series.last_v), "details": details})
        return tuple(out)

    def _check_fill(self, b: Binding) -> None:
        reason = b.detector.unfillable(b.series.interval())
        if reason is not None:
            b.unfillable = reason
            if self.on_unfillable is not None:
                self.on_unfillable(b, reason)

    @staticmethod
    def _held(b: Binding, f: Finding, t: float) -> Finding:
        """``keep_firing_for_steps``: a condition that just cleared stays active for that many of the series'
        own intervals (in sample time: a 12-min step must not resolve it between two records)."""
        if f.active:
            b.hold_until = t + b.rule.keep_firing_for_steps * b.series.interval()
            return f
        if b.active and b.finding is not None and t <= b.hold_until:
            return Finding(t, True, b.finding.score, b.finding.details)
        return f

    def _for_s(self, b: Binding) -> float:
        if not b.rule.for_steps:
            return b.rule.for_s
        return max(b.rule.for_s, b.rule.for_steps * b.series.interval())

    def _fresh(self, b: Binding, now: float) -> bool:
        # a finding stays fresh for the lookback delta or, for a series sampled once per training step,
        # for 3 of its own intervals (a 12-min step must not resolve the alert between two records) -- or as
        # long as its rule holds a cleared condition (keep_firing_for_steps): verl 0.6/0.7 write through an
        # 8 KB buffer, so a PPO log delivers ~3 records at once, and an alert held in steps resolved and
        # paged again at every burst -- or, once the series has come back after a longer gap, past
        # LONG_GAP_MARGIN of that gap: a run whose collapse made its steps 150 s validates and saves in 723-s
        # steps, and a held collapse resolved and paged again at each of them
        if not b.active:
            return False
        age = now - b.last_t
        # every horizon is at least ``stale_after_s``: a series sampled since needs no interval worked out
        # (a median of 16 gaps, per firing alert per tick: at 1000 GPUs with 627 firing, most of a tick)
        if age <= self.stale_after_s or b.detector.ticks:
            return True
        return age <= max(self.horizon(b.series), b.rule.keep_firing_for_steps * b.series.interval(),
                          LONG_GAP_MARGIN * b.series.longest_gap())

    def _joint_since(self, b: Binding, now: float) -> float | None:
        if not self._fresh(b, now) or b.since is None:
            b.joint_since = None
            return None
        if len(b.rule.conditions) == 1:
            return b.since
        ri = b.rule_index
        for ci in range(1, len(b.rule.conditions)):
            if not any(self._fresh(h, now) for h in self._helpers.get((ri, ci, b.join), [])):
                b.joint_since = None
                return None
        if b.joint_since is None:
            b.joint_since = now
        return b.joint_since


    def rule_states(self) -> list[dict[str, Any]]:
        """Per rule, what ``/rules`` shows: series bound, how many hold their condition now, the warm-up
        samples still to come (the least-advanced series) and the last value seen."""
        out = [{"series": 0, "active": 0, "warmup_left": None, "last_value": None, "last_t": None}
               for _ in self.rules]
        for bound in self._by_series.values():
            for b in bound:
                if b.cond != 0:
                    continue
                row = out[b.rule_index]
                row["series"] += 1
                row["active"] += b.active
                want = b.rule.conditions[0].warmup_steps
                left = max(0, want - b.samples)
                row["warmup_left"] = left if row["warmup_left"] is None else max(row["warmup_left"], left)
                if row["last_t"] is None or b.series.last_t > row["last_t"]:
                    row["last_t"], row["last_value"] = b.series.last_t, b.series.last_v
        return out
