"""The monitor's pipeline, shared by the daemon and replay, forward only:

samples -> SeriesStore -> Evaluator (detectors per rule binding) -> annotate (templates, plots, prompts)
        -> AlertBook (state machine + transition log, SQLite) -> records; the log wakes its followers

The book commits each transition once, into the transition log (``alerting.translog``), with the
evidence a diagnosis needs in the same transaction; the alerting engine subscribed to that log when it
was built and reads it on its own thread from a cursor of its own: nothing here calls it. The evidence
is captured here, where the series are (``monitor.book.evidence``): with every transition, and every
``needs.rediagnose_s`` while an alert that a diagnosis procedure explains (``needs.trigger_alerts``) is
firing (its cause may be scraped a few seconds after it fired). What the diagnoses read comes from
alerting as data (``DiagnosisNeeds``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alerting import vocabulary
from alerting.clock import Clock
from alerting.durable import StorageHealth
from alerting.evidence import Evidence
from alerting.model import Alert
from alerting.sink import DiagnosisNeeds, LogFollower, diagnosis_needs
from alerting.vocabulary import Vocabulary
from monitor import heap
from monitor.book.alerts import AlertBook
from monitor.book.annotate import Annotator, RewardOutliers
from monitor.book.evidence import EvidenceCapture, NonFiniteLog
from monitor.book.plot_worker import PlotWorker
from monitor.endpoints.metrics import MonitorMetrics
from monitor.evaluation.evaluator import Evaluator
from monitor.evaluation.rules import Rule
from monitor.model import PLUMBING_LABELS, Sample
from monitor.series.store import Series, SeriesStore, StoreLimits, series_key
from monitor.sources import verl_jsonl

log = logging.getLogger("monitor.pipeline")

Record = dict[str, Any]
EVICT_EVERY_S = 60.0


class Pipeline:
    def __init__(self, rules: list[Rule], clock: Clock, *, cluster: str = "default",
                 db_path: str | Path | None = None, plots_dir: str | Path | None = None,
                 plot_prefix: str | None = None, metrics: MonitorMetrics | None = None,
                 engine: LogFollower | None = None, on_record: Callable[[Record], None] | None = None,
                 outliers: RewardOutliers | None = None, limits: StoreLimits | None = None,
                 restore_grace_s: float = 600.0, health: StorageHealth | None = None,
                 needs: DiagnosisNeeds | None = None, plots_in_child: bool = False) -> None:
        """``engine``: subscribed to the alert book's log here, once; ``needs``: what alerting's diagnoses
        read (this version's when not given), measured only when an engine follows; ``plots_in_child``:
        matplotlib runs in a child process (``monitor.book.plot_worker``), never in this one."""
        self.clock = clock
        self.needs = needs or diagnosis_needs()
        self._diagnosed = engine is not None
        self.metrics = metrics or MonitorMetrics()
        self.health = health or StorageHealth()
        # a series' ring holds what its readers read: the diagnosis evidence (known by name at creation;
        # read only when an engine follows: a monitor without one diagnoses nothing, and the evidence's
        # 4096-sample rings were ~60 % of the samples it kept at 1000 GPUs) and its rules (at binding, then
        # at its interval); the rest keep store.UNREAD_HISTORY samples
        self.store = SeriesStore(limits, on_drop=lambda r: self.metrics.series_dropped.labels(r).inc(),
                                 on_evict=lambda s: self.evaluator.forget(s),
                                 pinned=lambda s: self.evaluator.pinned(s),
                                 history=lambda s: self.evidence.history(s) if self._diagnosed else 0)
        self.evaluator = Evaluator(rules, cluster, self.store.limits.stale_after_s,
                                   reserve=lambda s, n: s.reserve(self.store.bounded(n)))
        self.evaluator.on_unfillable = self._unfillable
        self._evicted_at = -math.inf
        self._trimmed_at = -math.inf
        self.book = AlertBook(db_path, restore_grace_s, health=self.health, monotonic=clock.monotonic)
        self.cluster = cluster
        self.annotator = Annotator(clock, self.vocabulary, Path(plots_dir) if plots_dir else None, outliers)
        self.annotator.plot_prefix = plot_prefix
        if plots_in_child and plots_dir:
            self.annotator.plot_worker = PlotWorker()
        self.on_record = on_record
        self.rejected: dict[str, int] = {}
        self.rejects: dict[tuple[str, str], int] = {}  # (source, reason) since the caller last cleared it
        self._newest = -math.inf
        self.config_info: dict[str, dict[str, str]] = {}  # node -> the run's settings (verl_config_info)
        self.verl_nodes: set[str] = set()  # nodes whose series came from volcengine verl (vocabulary)
        self.nonfinite = NonFiniteLog()
        self.evidence = EvidenceCapture(self.store, self.nonfinite, self.needs.series_read)
        self._evidence_due = -math.inf  # next refresh of the evidence handed forward while diagnosable alerts fire
        if engine is not None:
            engine.follow(self.book.log)  # from its cursor: what it missed before a restart comes first

    # -- ingest ----------------------------------------------------------------------------------

    def ingest(self, samples: Iterable[Sample], source: str = "replay", seen: float | None = None,
               known: tuple[list[Series], Any, float] | None = None) -> int:
        """``seen``: the monitor's clock at a scrape (its samples' liveness and alert start time).
        ``known``: (series, values, time) the scrape cache resolved: no label parsing, no store lookup."""
        started = time.perf_counter()
        n = 0
        at = seen if seen is not None else self.clock.now()  # for eviction: when the monitor last saw it
        if known is not None:
            n = self._ingest_known(known, source, seen, at)
        for s in samples:
            series = self.series(s.name, s.labels, source)
            if series is None:
                continue
            if self.observe(series, s.t, s.value, source, seen):
                n += 1
            elif seen is not None:
                self.evaluator.touch(series, seen)
            if at > series.seen:
                series.seen = at
        if n:
            self.metrics.samples_ingested.labels(source).inc(n)
        self.metrics.detector_eval.observe(time.perf_counter() - started)
        self.metrics.series.set(len(self.store))
        return n

    def _ingest_known(self, known: tuple[list[Series], Any, float], source: str, seen: float | None,
                      at: float) -> int:
        """Same steps as ``ingest`` for series already stored (values finite, checked by the scrape).

        ``observe`` inlined: ~70 % of the 1000-GPU load's series match no rule, and for them a sample is
        only ``Series.append``; the evaluator is called for series with bindings (or none made yet)."""
        series_list, values, t = known
        n = 0
        evaluator = self.evaluator
        feeding, unbound = evaluator.feeding, evaluator.unbound
        observe, touch = evaluator.observe, evaluator.touch
        for series, value in zip(series_list, values.tolist(), strict=True):
            if t > series.last_t:
                v = series.append(t, value)
                n += 1
                if series.bound is not unbound or series.id in feeding:  # None: not bound yet
                    observe(series, t, v, seen)
            else:
                self._reject(source, "out_of_order" if t < series.last_t else "duplicate_timestamp")
                if seen is not None:
                    touch(series, seen)
            if at > series.seen:
                series.seen = at
        if n and t > self._newest:
            self._newest = t
        return n

    def forget_source(self, source: str) -> int:
        """Drop every series ``source`` holds (a target removed from service discovery): its detectors and
        absence rules go with them, as Prometheus' staleness markers end a removed target's series."""
        return self.store.remove_source(source)

    def touch(self, samples: Iterable[Sample], seen: float) -> None:
        """Samples refused for their stamps (too old, too far ahead) that were in a successful scrape:
        their series are alive at ``seen`` (absence rules, eviction) though no value is stored."""
        for s in samples:
            series = self.store.get(series_key(s.name, s.labels))
            if series is not None:
                self.evaluator.touch(series, seen)
                series.seen = max(series.seen, seen)

    def series(self, name: str, labels: dict[str, str], source: str = "") -> Series | None:
        """The stored series for ``name``/``labels`` (created on first sight in ``source``'s budget; None
        when capped)."""
        known = len(self.store)
        series = self.store.get_or_create(name, labels, source)
        if series is None:
            self._count_reject(source, "series_limit")
        if series is not None and len(self.store) > known:
            node = labels.get("node", "unknown")
            fresh_verl = labels.get("job") == verl_jsonl.JOB and node not in self.verl_nodes
            if labels.get("job") == verl_jsonl.JOB:
                self.verl_nodes.add(node)
            if name == "verl_config_info" or fresh_verl:
                info = dict(self.config_info.get(node, {}))
                if name == "verl_config_info":
                    info = {k: v for k, v in labels.items() if k not in PLUMBING_LABELS and k != "node"}
                if node in self.verl_nodes:
                    info["trainer"] = "verl"  # diagnoses speak verl's key names for this run (alerting/findings.py)
                self.config_info[node] = info  # travels forward with the next evidence
        return series

    def _unfillable(self, b: Any, reason: str) -> None:
        """A rule that would stay silent for hours says so, once per series."""
        log.warning("rule %s (%s) on %s%s can never test: %s; size it in steps (steps: / per_step: true)",
                    b.rule.alert, b.rule.conditions[b.cond].detector_type, b.series.name,
                    {k: v for k, v in b.series.labels.items() if k != "job"}, reason)
        self.metrics.window_unfillable.labels(b.rule.alert, b.rule.conditions[b.cond].detector_type).set(1)

    def vocabulary(self, node: str) -> Vocabulary:
        """The config vocabulary of the run on ``node``: verl's keys for a volcengine verl run."""
        return Vocabulary(vocabulary.VERL if node in self.verl_nodes else vocabulary.OURS,
                          self.config_info.get(node))

    def observe(self, series: Series, t: float, value: float, source: str = "replay",
                seen: float | None = None) -> bool:
        """Fast path for one sample of a known series; False if rejected (non-finite, out of order,
        or a repeat of the last timestamp, e.g. an exporter's explicit timestamp scraped twice)."""
        if not math.isfinite(value):
            self.nonfinite.add(series, t)  # not stored, but "reward mean is NaN" is evidence
            self._reject(source, "nonfinite_value")
            return False
        if t <= series.last_t:
            self._reject(source, "out_of_order" if t < series.last_t else "duplicate_timestamp")
            return False
        v = series.append(t, value)
        self.evaluator.observe(series, t, v, seen)
        if t > self._newest:
            self._newest = t
        return True

    def _reject(self, source: str, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self._count_reject(source, reason)

    def _count_reject(self, source: str, reason: str) -> None:
        self.metrics.scrape_errors.labels(source, reason).inc()
        self.rejects[(source, reason)] = self.rejects.get((source, reason), 0) + 1

    # -- evaluate --------------------------------------------------------------------------------

    def tick(self) -> list[Alert]:
        now = self.clock.now()
        started = time.perf_counter()
        if now - self._evicted_at >= EVICT_EVERY_S:  # the head GC: unseen series give their budget back
            self._evicted_at = now
            self.store.evict_stale(now, self.evaluator.evict_horizon)
        if now - self._trimmed_at >= heap.TRIM_EVERY_S:
            self._trimmed_at = now
            heap.trim()
        evaluation = self.evaluator.tick(now)
        annotations = self.annotator.annotate(self.book.starting(evaluation.candidates))
        transitions = self.book.update(now, evaluation, annotations, self._explain())
        self.metrics.detector_eval.observe(time.perf_counter() - started)
        if math.isfinite(self._newest):
            self.metrics.eval_lag.set(max(0.0, now - self._newest))
        if transitions:
            self._refresh_firing_gauge()
            self._emit(transitions)
        elif self._diagnosed and now >= self._evidence_due:
            self._refresh_evidence(now)
        # every tick, as a follower on simulated time retries what it could not take before (its own
        # database failed); a follower on its own thread only wakes
        self.book.log.notify()
        return transitions

    def _explain(self) -> Callable[[list[Alert]], Evidence] | None:
        return self._capture if self._diagnosed else None

    def _diagnosable_nodes(self, firing: list[dict[str, str]]) -> set[str] | None:
        """Nodes of the firing alerts (their labels) a diagnosis procedure explains (None: one has no node, so all)."""
        nodes: set[str] = set()
        for labels in firing:
            if labels["alertname"] in self.needs.trigger_alerts:
                if "node" not in labels:
                    return None
                nodes.add(labels["node"])
        return nodes

    def _capture(self, alerts: list[Alert]) -> Evidence:
        now = self.clock.now()
        self._evidence_due = now + self.needs.rediagnose_s
        firing = self.book.firing_labels() + [a.labels for a in alerts if a.status == "firing"]
        return self.evidence.capture(now, self._diagnosable_nodes(firing), self.config_info)

    def _refresh_evidence(self, now: float) -> None:
        """While a diagnosable alert fires, its evidence is measured again and written to the log."""
        self._evidence_due = now + self.needs.rediagnose_s
        if self._diagnosable_nodes(self.book.firing_labels()) != set():
            self.book.note_evidence(self._capture([]), now)

    def set_base_url(self, base: str) -> None:
        """Where the monitor's API is reachable: plot links and each alert's generatorURL point there."""
        self.annotator.plot_prefix = f"{base.rstrip('/')}/api/v1/plots"
        self.book.url_prefix = f"{base.rstrip('/')}/api/v1/alerts"

    def submit_external(self, alerts: list[Alert]) -> list[Alert]:
        """Alerts evaluated elsewhere (Alertmanager webhook): book-kept and forwarded like ours."""
        out = self.book.receive(alerts, self.clock.now(), self._explain())
        if out:
            self._refresh_firing_gauge()
            self._emit(out)
            self.book.log.notify()
        return out

    def _emit(self, alerts: list[Alert]) -> None:
        if self.on_record is not None:
            for a in alerts:
                self.on_record({"kind": "alert", **a.to_json()})

    def _refresh_firing_gauge(self) -> None:
        g = self.metrics.alerts_firing
        g.clear()
        for (name, severity), n in self.book.firing_counts().items():
            g.labels(name, severity).set(n)

    def close(self) -> None:
        self.book.close()
        if self.annotator.plot_worker is not None:
            self.annotator.plot_worker.close()

