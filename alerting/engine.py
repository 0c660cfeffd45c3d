"""The alerting pipeline behind one object, built once from config: correlate (+ diagnose) -> route /
group -> inhibit -> silence -> dedup (notification log, repeat) -> outbox -> per-receiver notify workers,
durable in SQLite. Alert transitions come from a transition log (``alerting.translog``): the monitor's,
which the engine subscribes to once (``follow``) and reads through a connection of its own, or the
engine's own that ``submit`` appends to; ``catch_up`` reads what is new past the engine's cursor (with the
newest evidence snapshot written beside it) and commits the cursor in the same transaction as what it
did with those transitions. The engine keeps only what is its own: groups, notification log, silences,
outbox, incidents. Nobody calls it on the monitor's scrape path: the log's writer only wakes it.

Timers are the engine's own: in the daemon ``start`` runs them in a thread (catching up on the log,
holds, group_wait / group_interval / repeat, retries, pruning) next to the delivery workers
(``alerting.notify``); on simulated time (replay, tests) a commit to the followed log is caught up on at
once, and the caller runs ``tick`` as it moves the clock, or ``drain`` to run it forward until every
notification is out.

Bounded state: resolved incidents, resolved alerts, finished outbox rows and expired silences are
forgotten ``retention_s`` after they ended; each save rewrites only the parts that changed (one row per
incident, one small snapshot of the rest)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

import httpx
import prometheus_client

from alerting.clock import Clock
from alerting.config import AlertingConfig, load_config
from alerting.correlate import Correlator, load_rules
from alerting.dispatch import Dispatcher
from alerting.durable import STORAGE_ERRORS, StorageHealth, StorageUnavailable, reappear, transaction
from alerting.engine_views import EngineViews
from alerting.errors import AlertingConfigError
from alerting.evidence import Evidence
from alerting.inhibit import Inhibitor
from alerting.loghealth import TransitionLogHealth
from alerting.metrics import AlertingMetrics
from alerting.model import Alert
from alerting.notifiers import Notifier, build_notifier
from alerting.notify import DeliveryWorkers, NotifyStage
from alerting.outbox import Outbox
from alerting.silence import SilenceStore
from alerting.stages import DedupStage, Flush, MuteStage
from alerting.store import EngineState, load_state, open_db
from alerting.translog import READ_BATCH, Cursor, TransitionLog
from alerting.translog import append as log_append
from alerting.translog import prune as prune_log

HISTORY = 5000  # alerts kept for the JSON API; older resolved ones are dropped first
RETENTION_S = 24 * 3600.0  # how long resolved incidents/alerts and finished notifications are kept
PRUNE_EVERY_S = 60.0
TIMER_MAX_WAIT_S = 1.0
log = logging.getLogger("verl.alerting")


class AlertEngine:
    """correlate -> route (group/inhibit/silence/repeat) -> outbox -> notifiers; durable in SQLite."""

    def __init__(self, config: AlertingConfig, db_path: str | Path, clock: Clock,
                 on_record: Callable[[dict], None] | None = None,
                 registry: prometheus_client.CollectorRegistry | None = None,
                 transport: httpx.BaseTransport | None = None, sign_clock: Clock | None = None,
                 retention_s: float = RETENTION_S, health: StorageHealth | None = None) -> None:
        self.config = config
        self.health = health or StorageHealth()
        self.db_path = Path(db_path)
        self.db_name = self.db_path.name
        self.retention_s = retention_s
        self._pruned_at = float("-inf")
        self.state = EngineState()  # what each state row holds now, so unchanged parts are not rewritten
        self._timer: threading.Thread | None = None
        self._timer_stop = threading.Event()
        self._timer_wake = threading.Event()  # a submit wakes the timers: a 0s group_wait flushes at once
        self.clock = clock
        self.on_record = on_record or (lambda rec: None)
        self.metrics = AlertingMetrics(registry)
        self.lock = threading.RLock()
        try:
            self.conn = open_db(db_path, self.health)
        except (sqlite3.Error, OSError) as exc:
            raise AlertingConfigError(f"{db_path}: cannot open the alerting state database ({exc}); "
                              "pass a writable path") from None
        self._rules = load_rules(config.correlation_files)
        self.correlator = Correlator(self._rules)
        self.inhibitor = Inhibitor(config.inhibit_rules)
        snapshot = None if str(db_path) == ":memory:" else self.db_path.with_name("silences.json")
        self.silences_store = SilenceStore(self.conn, snapshot)
        self._build_routing()
        self.outbox = Outbox(self.conn, config.outbox)
        self.notifiers: dict[str, Notifier] = {
            name: build_notifier(rc, sign_clock=sign_clock, transport=transport)
            for name, rc in config.receivers.items()}
        for n in self.notifiers.values():
            if hasattr(n, "external_url"):
                n.external_url = config.monitor_url  # type: ignore[attr-defined]
        self.notify = NotifyStage(config, self.outbox, self.notifiers, self.metrics, self._record)
        self.delivery = DeliveryWorkers(self.notify, self.lock, lambda op: self.transaction(op, reload=False),
                                        clock, self._save_limiters, self.db_name)
        self.history: dict[str, Alert] = {}
        self.views = EngineViews(self)  # what people see and change: alerts, incidents, silences
        self.own_log = self.log = TransitionLog(self.conn)  # until ``follow`` names another
        self._evidence_at = 0  # the newest evidence snapshot of the followed log taken
        self.log_health = TransitionLogHealth(self.metrics.log_problems, self.health)
        self._restore()

    @classmethod
    def from_file(cls, path: str | Path, db_path: str | Path, clock: Clock,
                  on_record: Callable[[dict], None] | None = None,
                  registry: prometheus_client.CollectorRegistry | None = None, **kw: Any) -> AlertEngine:
        return cls(load_config(path), db_path, clock, on_record, registry, **kw)

    # -- pipeline ------------------------------------------------------------------------------------
    def _record(self, rec: dict[str, Any]) -> None:
        self.on_record(rec)

    def transaction(self, op: str, reload: bool = True) -> AbstractContextManager[None]:
        """Stage changes and their snapshot commit together, so a crash cannot queue a notification
        whose notification-log entry is lost (or the reverse). No HTTP happens inside. When the write
        fails the in-memory stages are rebuilt from what is committed (``reload``: the change is not
        applied) and StorageUnavailable is raised; the caller retries later."""
        return transaction(self.conn, self.health, self.db_name, op, self.db_path,
                           self._reload if reload else lambda: None)

    def _reload(self) -> None:
        """Drop what the failed transaction changed in memory: the stages again as last committed."""
        evidence = self.correlator.evidence
        self.correlator = Correlator(self._rules)
        self.correlator.evidence = evidence
        self._build_routing()
        self.state = EngineState()
        try:
            self._restore(with_limiters=False)  # the robots' budgets are real spending: kept as they are
        except STORAGE_ERRORS as exc:
            self.health.failed(self.db_name, "reload", exc)

    def _check_file(self) -> None:
        """A state dir deleted under us is noticed on the next tick and recreated from the open file."""
        try:
            fresh = reappear(self.conn, self.db_path, self.health)
        except STORAGE_ERRORS as exc:
            self.health.failed(self.db_name, "recreate", exc)
            return
        if fresh is not None:
            self.conn = self.outbox.conn = self.silences_store.conn = self.own_log.conn = fresh
            self.views.save_silences()

    def _page_pending(self, fp: str, now: float) -> bool:
        """True while ``fp`` fires but its page has not flushed into the outbox yet (held for correlation,
        or in a group that has not flushed since it arrived); False once paged or when it is muted."""
        return self.correlator.holds(fp) or self.flush.unpaged(fp, now)

    def follow(self, log: TransitionLog) -> None:
        """Take transitions from ``log`` (the monitor's) from now on, from the cursor saved for it; its
        evidence from the next snapshot on (one from before a restart describes another moment)."""
        with self.lock:
            self._subscribe(None)  # a log followed before: no longer
            self.log = log.reader()
            self._evidence_at = self.log.evidence_head()
            self.log_health.follow(self.log)
            self._reload()
            self._subscribe(self._timer is not None)

    def _subscribe(self, threaded: bool | None) -> None:
        """What a commit to the followed log runs on the writer's thread: started, only the timer thread's
        event is set (no engine code, lock or read there); on simulated time, ``_committed``; None: nothing."""
        for wake in (self._committed, self._timer_wake.set):
            self.log.unsubscribe(wake)
        if threaded is not None:
            self.log.subscribe(self._timer_wake.set if threaded else self._committed)

    def _committed(self) -> None:
        """Simulated time: taken at once (a failure is counted and logged; the next commit retries)."""
        with suppress(StorageUnavailable):
            self.catch_up()

    def catch_up(self, evidence: Evidence | None = None) -> int:
        """Take what the log holds past the cursor (``alerting.translog.Cursor.accept``), with the newest
        evidence written beside it (or ``evidence``) and its ``verl_config_info`` labels (kept until newer
        evidence comes). Raises StorageUnavailable when the write failed: nothing taken, read again next."""
        return self._catch_up(evidence, ())

    def submit(self, alerts: Sequence[Alert], evidence: Evidence | None = None) -> None:
        """``alerts`` appended to the engine's own log and taken, in one transaction (the engine on its own:
        Alertmanager-style alerts, tests). Raises StorageUnavailable: nothing was appended; submit again."""
        if alerts and self.log is not self.own_log:
            raise RuntimeError("this engine follows another transition log: append there")
        self._catch_up(evidence, alerts)

    def _catch_up(self, evidence: Evidence | None, alerts: Sequence[Alert]) -> int:
        with self.lock:
            rows = [] if alerts else self.cursor.due()  # read before the write lock: most ticks bring nothing
            self.log_health.read(self.clock.monotonic())
            logged = None if self.log is self.own_log else self.log.evidence_after(self._evidence_at)
            if logged is not None:
                evidence = evidence or logged[1]
            if not rows and not alerts and evidence is None and logged is None:
                return 0
            with self.transaction("catch_up"):
                now = self.clock.now()
                if alerts:  # a fresh cursor catches up on the log as it was, then takes these
                    rows = self.cursor.due() if self.cursor.at is None else []
                    for a in alerts:
                        log_append(self.conn, a, now, again=True)
                    rows += self.cursor.due()
                if evidence is not None:
                    self.correlator.note_evidence(evidence)
                taken = 0
                while True:  # a backlog longer than a read is taken whole, in bounded reads
                    n = self.cursor.accept(rows, lambda fp: self._page_pending(fp, now),
                                           lambda a: self._observe(a, now))
                    taken += n
                    if n < len(rows) or len(rows) < READ_BATCH:
                        break
                    rows = self.cursor.due()
                self._trim_history()
                self._flush(now)
                self._save()
            if logged is not None:
                self._evidence_at = logged[0]
            self.log_health.note_bad_rows(self.log)
        self._timer_wake.set()
        self.delivery.wake()
        return taken

    def _observe(self, alert: Alert, now: float) -> None:
        self.history[alert.fingerprint] = alert
        routed, incidents = self.correlator.observe(alert, now)
        for inc in incidents:
            if inc.open and not inc.revision:
                self.metrics.incidents.labels(inc.rule).inc()
            self._record(inc.record())
        for a in routed:
            self.dispatcher.add(a, now)

    def _build_routing(self) -> None:
        """Route/group, then the flush stages: inhibit -> silence -> dedup (built once from config;
        rebuilt empty when a failed write reloads the committed state)."""
        self.dispatcher = Dispatcher(self.config.route, self.config.receivers)
        self.flush = Flush(self.dispatcher, [
            MuteStage("inhibit", lambda now: self.inhibitor.muting(self.dispatcher.active_alerts())),
            MuteStage("silence", self.silences_store.muting)], DedupStage(self.config.route, self.config.receivers))

    def muted(self, now: float) -> Callable[[Alert], bool]:
        inhibited = self.inhibitor.muting(self.dispatcher.active_alerts())
        silenced = self.silences_store.muting(now)
        return lambda a: silenced(a) or inhibited(a)

    def _flush(self, now: float) -> bool:
        """Expire holds and flush due groups into the outbox; True when state changed."""
        formed = self.correlator.rediagnose(now)  # diagnosis hook: members whose evidence arrived since
        for inc in formed:
            self.metrics.incidents.labels(inc.rule).inc()
            self._record(inc.record())
            self.dispatcher.add(inc.alert, now)
        released = self.correlator.expire(now)
        for a in released:
            self.dispatcher.add(a, now)
        notes = self.flush.due(now, self.correlator.expand)
        for n in notes:
            self.outbox.put(n, now)
        self.metrics.outbox_depth.set(self.outbox.depth())
        return bool(formed or released or notes)

    def tick(self) -> None:
        with self.lock:
            now = self.clock.now()
            self._check_file()
            try:
                with self.transaction("flush"):
                    changed = self._flush(now)
                    pruning = now - self._pruned_at >= PRUNE_EVERY_S
                    if pruning:
                        changed = self.prune(now) or changed
                    if changed:  # a quiet tick (the common case in replay) writes nothing
                        self._save()
            except StorageUnavailable:
                changed = pruning = False  # not applied: the same groups flush again on a later tick
            if pruning:  # also picks up silences that verl-alert wrote straight into the database
                self.views.save_silences()
            if self.delivery.running:
                if changed:
                    self.delivery.wake()
                return  # the delivery workers send
            self.delivery.deliver(self.notify.plan(now))
            self.metrics.outbox_depth.set(self.outbox.depth())

    # -- timers and delivery ----------------------------------------------------------------------
    def start(self, monitor_url: str = "") -> None:
        """Daemon mode: the engine runs its own timers (correlation holds, group_wait / group_interval /
        repeat, outbox retries, pruning) in a thread of its own, and one delivery worker per receiver
        sends (``alerting.notify.DeliveryWorkers``); nobody else calls ``tick``. Simulated-time callers
        instead call ``tick`` (or ``drain``) as they move time. Chat links open ``monitor_url`` (the
        monitor's console) unless the config names one."""
        if monitor_url and not self.config.monitor_url:
            self.config.monitor_url = monitor_url.rstrip("/")
        self.delivery.start()
        with self.lock:
            if self._timer is not None:
                return
            self._timer_stop.clear()
            self._timer = threading.Thread(target=self._timer_loop, name="alerting-timers", daemon=True)
            self._timer.start()
            self._subscribe(True)

    def _timer_loop(self) -> None:
        failed_before = False
        while not self._timer_stop.is_set():
            try:
                if self.log is not self.own_log:
                    with suppress(StorageUnavailable):  # counted and logged; taken on the next round
                        self.catch_up()
                self.tick()
                failed_before = False
            except Exception as exc:  # the timers must outlive any one failure
                if not failed_before:
                    log.error("alerting timers: %s: %s; retrying", type(exc).__name__, str(exc)[:200])
                failed_before = True
            with self.lock:
                now = self.clock.now()
                due = [t for t in (self.correlator.next_due(), self.dispatcher.next_flush()) if t is not None]
            # wake at the next due timer (at most a second away, so pruning and retries keep their pace)
            self._timer_wake.wait(min(TIMER_MAX_WAIT_S, max(0.01, min(due, default=now + 1.0) - now)))
            self._timer_wake.clear()

    def start_delivery(self) -> None:  # only the delivery workers: tests drive the timers with ``tick``
        self.delivery.start()

    def stop_delivery(self, timeout: float = 1.0) -> None:
        """Stop the timers and the delivery workers (see ``DeliveryWorkers.stop``)."""
        self._timer_stop.set()
        self._timer_wake.set()
        timer, self._timer = self._timer, None
        with self.lock:
            self._subscribe(False)
        if timer is not None:
            timer.join(timeout)
        self.delivery.stop(timeout)

    def delivery_problems(self, stuck_after_s: float = 120.0) -> list[str]:
        """/healthz reasons: a delivery worker that died or is stuck, outcomes not yet written."""
        return self.delivery.problems(stuck_after_s)

    def problems(self) -> list[str]:
        """/healthz reasons: ``delivery_problems``, and transitions in the log the engine is stuck behind."""
        with self.lock:
            behind = self.cursor.behind()
        taken = self.log_health.lag(behind, self.clock.monotonic(), self.health.failing(self.db_name))
        return self.delivery_problems() + taken

    def oldest_undelivered(self) -> float | None:
        """Queue time (engine clock) of the oldest notification not yet delivered."""
        with self.lock:
            return self.outbox.oldest_pending()

    # -- retention -------------------------------------------------------------------------------------
    def prune(self, now: float) -> bool:
        """Forget what ended more than ``retention_s`` ago; True when something was removed."""
        self._pruned_at = now
        cutoff = now - self.retention_s
        routed = {a.fingerprint for a in self.dispatcher.active_alerts()}
        gone_inc = self.correlator.forget_incidents(cutoff, routed)
        keep = self.correlator.referenced() | routed
        gone = [fp for fp, a in self.history.items()
                if a.status == "resolved" and (a.ends_at or a.starts_at) < cutoff and fp not in keep]
        for fp in gone:
            del self.history[fp]
        n = self.outbox.prune(cutoff)
        n += self.conn.execute("DELETE FROM silences WHERE ends_at<?", (cutoff,)).rowcount
        if self.log is self.own_log:  # the monitor prunes its own log (``AlertBook.prune``)
            n += prune_log(self.conn, cutoff, self.cursor.at)
        return bool(gone_inc or gone or n)

    def pending(self) -> bool:
        """Anything still to be sent: held alerts, groups with news, or queued notifications."""
        with self.lock:
            now = self.clock.now()
            return bool(self.correlator.next_due() is not None or self.flush.next_news(now) is not None
                        or self.outbox.depth())

    def drain(self, max_wait_s: float) -> bool:
        """Deliver everything pending, moving time forward (a SimulatedClock advances, a SystemClock
        sleeps); True when nothing is left to send."""
        deadline = self.clock.now() + max_wait_s
        while True:
            self.tick()
            with self.lock:
                now = self.clock.now()
                times = [t for t in (self.correlator.next_due(), self.flush.next_news(now),
                                     self.notify.next_due(now)) if t is not None]
            if not times:
                return True
            nxt = max(min(times), now)
            if nxt > deadline or (nxt <= now and now >= deadline):
                return False
            # nxt == now only when a delivery could not start (e.g. a two-message WeCom send with one slot
            # left); a short step lets the budget refill instead of spinning.
            self.clock.sleep(nxt - now if nxt > now else min(0.5, deadline - now))

    def _trim_history(self) -> None:
        if len(self.history) > HISTORY:
            keep = self.correlator.referenced() | {a.fingerprint for a in self.dispatcher.active_alerts()}
            old = sorted((a for a in self.history.values() if a.fingerprint not in keep),
                         key=lambda a: (a.status == "firing", a.ends_at or a.starts_at))
            gone = old[: len(self.history) - HISTORY]
            for a in gone:
                self.history.pop(a.fingerprint, None)

    # -- durability --------------------------------------------------------------------------------------
    def _save(self) -> None:
        """Write the parts of the state that changed since the last save (and only those)."""
        self.state.save(self.conn, self.correlator, self.dispatcher, self.flush.dedup)
        self.state.save_row(self.conn, "cursor", self.cursor.to_state())
        self._save_limiters()

    def _save_limiters(self) -> None:
        self.state.save_row(self.conn, "limiters", {k: v.to_state() for k, v in self.notify.limiters.items()})

    def _restore(self, with_limiters: bool = True) -> None:
        """The stages as last committed; the alerts they refer to as the log stood at the cursor."""
        self.cursor = Cursor(self.log, load_state(self.conn, "cursor"), self.log_health.problem)
        self.cursor.verify()  # at start: a place the log no longer holds is named before the first tick
        self.history = self.log.current(self.cursor.at)
        self.log_health.note_bad_rows(self.log)
        self.state.restore(self.conn, self.correlator, self.dispatcher, self.flush.dedup, self.history)
        if not with_limiters:
            return
        for k, v in self.state.limiters(self.conn).items():
            if k in self.notify.limiters:
                self.notify.limiters[k].load_state(v)

    def close(self) -> None:
        if self.delivery.running or self._timer is not None:
            self.stop_delivery()
        with self.lock:
            try:
                with self.transaction("close", reload=False):
                    self._save()
            except StorageUnavailable:
                pass  # already counted and logged; what was committed before stands
            for n in self.notifiers.values():
                n.close()
            self._subscribe(None)  # a closed engine is woken no more
            self.log.close()
            self.conn.close()
