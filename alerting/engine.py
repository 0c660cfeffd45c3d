"""The alerting pipeline behind one object: correlate -> route (group / inhibit / silence / repeat) ->
outbox -> notifiers, durable in SQLite. The monitor calls ``submit`` with the alerts it evaluates and
``tick`` on its loop; replay and tests call ``drain`` to run simulated time forward until every
notification is out.

Delivery off the watch path: once ``start_delivery`` has run (the daemon does), ``tick`` only moves
due groups into the durable outbox, and one delivery worker thread per receiver (Alertmanager's notify
stage) sends from it, making its HTTP calls without holding the engine's lock. A hanging robot then
delays only its own messages. A row is marked delivered only after its robot answered, so a kill -9
re-sends at most the message that was in flight (at-least-once).

Bounded state: resolved incidents, resolved alerts, finished outbox rows and expired silences are
forgotten ``retention_s`` after they ended; each save rewrites only the parts that changed (one row per
incident, one small snapshot of the rest)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from time import monotonic as _monotonic
from typing import Any

import httpx
import prometheus_client

from alerting.clock import Clock
from alerting.config import AlertingConfig, load_config
from alerting.correlate import Correlator, load_rules
from alerting.dispatch import Dispatcher
from alerting.durable import STORAGE_ERRORS, StorageHealth, StorageUnavailable, committed, reappear
from alerting.errors import ConfigError
from alerting.evidence import EvidenceReader
from alerting.inhibit import Inhibitor
from alerting.matchers import matcher_from_json
from alerting.metrics import AlertingMetrics
from alerting.model import Alert, alert_from_json
from alerting.notifiers import Delivery, Notifier, build_notifier
from alerting.notify import Job, NotifyStage
from alerting.outbox import Outbox
from alerting.silence import SilenceStore
from alerting.store import load_state, open_db, save_state

HISTORY = 5000  # alerts kept for the JSON API; older resolved ones are dropped first
RETENTION_S = 24 * 3600.0  # how long resolved incidents/alerts and finished notifications are kept
PRUNE_EVERY_S = 60.0
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
        # Outcomes of messages already sent whose write failed: committed on the next chance, in order.
        self._held_outcomes: list[tuple[Job, Delivery, float]] = []
        self._beats: dict[str, float] = {}  # delivery worker -> monotonic time of its last completed round
        self.retention_s = retention_s
        self._pruned_at = float("-inf")
        self._written: dict[str, str] = {}  # what each state row holds now, so unchanged parts are not rewritten
        self._written_incidents: dict[str, str] = {}
        self._incident_sigs: dict[str, tuple[Any, ...]] = {}
        self._workers: dict[str, threading.Thread] = {}
        self._wake: dict[str, threading.Event] = {}
        self._stopping = threading.Event()
        self.clock = clock
        self.on_record = on_record or (lambda rec: None)
        self.metrics = AlertingMetrics(registry)
        self.lock = threading.RLock()
        try:
            self.conn = open_db(db_path, self.health)
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(f"{db_path}: cannot open the alerting state database ({exc}); "
                              "pass a writable path") from None
        self._rules = load_rules(config.correlation_files)
        self.correlator = Correlator(self._rules)
        self.dispatcher = Dispatcher(config.route, config.receivers)
        self.inhibitor = Inhibitor(config.inhibit_rules)
        snapshot = None if str(db_path) == ":memory:" else self.db_path.with_name("silences.json")
        self.silences_store = SilenceStore(self.conn, snapshot)
        self.outbox = Outbox(self.conn, config.outbox)
        self.notifiers: dict[str, Notifier] = {
            name: build_notifier(rc, sign_clock=sign_clock, transport=transport)
            for name, rc in config.receivers.items()}
        for n in self.notifiers.values():
            if hasattr(n, "external_url"):
                n.external_url = config.monitor_url  # type: ignore[attr-defined]
        self.notify = NotifyStage(config, self.outbox, self.notifiers, self.metrics, self._record)
        self.history: dict[str, Alert] = {}
        self._restore()

    @classmethod
    def from_file(cls, path: str | Path, db_path: str | Path, clock: Clock,
                  on_record: Callable[[dict], None] | None = None,
                  registry: prometheus_client.CollectorRegistry | None = None, **kw: Any) -> AlertEngine:
        return cls(load_config(path), db_path, clock, on_record, registry, **kw)

    # -- pipeline ------------------------------------------------------------------------------------
    def _record(self, rec: dict[str, Any]) -> None:
        self.on_record(rec)

    def set_config_info(self, node: str, labels: dict[str, str]) -> None:
        with self.lock:
            info = {k: str(v) for k, v in labels.items() if k != "__name__"}
            if self.correlator.config_info.get(node) != info:
                self.correlator.config_info[node] = info
                self._save()

    def set_evidence(self, reader: EvidenceReader) -> None:
        """Where the diagnosis stage reads live series (the monitor's store; alerting/evidence.py)."""
        with self.lock:
            self.correlator.evidence = reader

    def set_plot_store(self, read: Callable[[str], bytes | None]) -> None:
        """Where notifiers that send images read a plot link's PNG, instead of fetching it over HTTP."""
        for n in self.notifiers.values():
            n.plot_store = read

    @contextmanager
    def _transaction(self, op: str, reload: bool = True) -> Iterator[None]:
        """Stage changes and their snapshot commit together, so a crash cannot queue a notification
        whose notification-log entry is lost (or the reverse). No HTTP happens inside.

        Commit, then act: when the write fails (disk full, read-only, I/O error) the transaction is
        rolled back, the in-memory stages are rebuilt from what is committed (``reload``: the change is
        not applied) and StorageUnavailable is raised; the caller retries later."""
        entered = False
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            before = self.conn.total_changes
            try:
                entered = True
                yield
                wrote = self.conn.total_changes != before
                self.conn.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
                raise
        except STORAGE_ERRORS as exc:
            self.health.failed(self.db_name, op, exc, self.db_path)
            if reload and entered:  # a BEGIN that failed changed nothing in memory
                self._reload()
            raise StorageUnavailable(f"{self.db_name}: {op}: {exc}") from exc
        if wrote:  # a quiet tick's empty transaction is no crash point
            committed()
        self.health.ok(self.db_name)

    def _reload(self) -> None:
        """Drop what the failed transaction changed in memory: the stages again as last committed."""
        evidence = self.correlator.evidence
        self.correlator = Correlator(self._rules)
        self.correlator.evidence = evidence
        self.dispatcher = Dispatcher(self.config.route, self.config.receivers)
        self._written, self._written_incidents, self._incident_sigs = {}, {}, {}
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
            self.conn = self.outbox.conn = self.silences_store.conn = fresh
            self._save_silences()

    def page_pending(self, fp: str) -> bool:
        """True while ``fp`` fires but its page has not flushed into the outbox yet (held for correlation,
        or in a group that has not flushed since it arrived); False once paged or when it is muted."""
        with self.lock:
            if fp in self.correlator.held:
                return True
            muted = self._muted_fn(self.clock.now())
            for g in self.dispatcher.groups.values():
                a = g.alerts.get(fp)
                if a is not None and a.status == "firing" and not muted(a):
                    log = self.dispatcher.nflog.get(g.key)
                    if log is None or fp not in log.firing:
                        return True
            return False

    def firing_alerts(self) -> list[Alert]:
        """The alerts the engine holds firing (the monitor reconciles its alert book against them)."""
        with self.lock:
            return [a for a in self.history.values() if a.status == "firing"]

    def submit(self, alerts: Sequence[Alert]) -> None:
        """Raises StorageUnavailable when the write failed: nothing was applied, submit them again."""
        with self.lock, self._transaction("submit"):
            now = self.clock.now()
            self.conn.executemany(
                "INSERT INTO alerts(fingerprint, value, seen_at) VALUES(?,?,?) ON CONFLICT(fingerprint) "
                "DO UPDATE SET value=excluded.value, seen_at=excluded.seen_at",
                [(a.fingerprint, json.dumps(dict(a.to_json(), value=a.value)), now) for a in alerts])
            for alert in alerts:
                self.history[alert.fingerprint] = alert
                routed, incidents = self.correlator.observe(alert, now)
                for inc in incidents:
                    if inc.open and not inc.revision:
                        self.metrics.incidents.labels(inc.rule).inc()
                    self._record(inc.record())
                for a in routed:
                    self.dispatcher.add(a, now)
            self._trim_history()
            self._flush(now)
            self._save()

    def _muted_fn(self, now: float) -> Callable[[Alert], bool]:
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
        notes = self.dispatcher.flush_due(now, self._muted_fn(now), self.correlator.expand)
        for n in notes:
            self.outbox.put(n, now)
        self.metrics.outbox_depth.set(self.outbox.depth())
        return bool(formed or released or notes)

    def tick(self) -> None:
        with self.lock:
            now = self.clock.now()
            self._check_file()
            try:
                with self._transaction("flush"):
                    changed = self._flush(now)
                    pruning = now - self._pruned_at >= PRUNE_EVERY_S
                    if pruning:
                        changed = self.prune(now) or changed
                    if changed:  # a quiet tick (the common case in replay) writes nothing
                        self._save()
            except StorageUnavailable:
                changed = pruning = False  # not applied: the same groups flush again on a later tick
            if pruning:  # also picks up silences that verl-alert wrote straight into the database
                self._save_silences()
            if self._workers:
                if changed:
                    for wake in self._wake.values():
                        wake.set()
                return  # the delivery workers send
            self._deliver(self.notify.plan(now))
            self.metrics.outbox_depth.set(self.outbox.depth())

    def _deliver(self, jobs: list[Job], worker: bool = False) -> bool:
        """Commit the attempt, send, commit the outcome. An attempt that cannot be recorded is not
        sent; an outcome that cannot be recorded is held in memory (its rows are not planned again)
        and written when the disk takes it. A delivery worker stops between jobs when asked to.
        True when every job was sent and recorded (a worker then plans again at once; otherwise it
        waits its round, so a full disk is not retried in a tight loop)."""
        if not self._write_outcomes():
            return False
        for job in jobs:
            if worker and self._stopping.is_set():
                return False
            try:
                with self.lock, self._transaction("claim", reload=False):
                    self.notify.outbox.claim(job.rows)
            except StorageUnavailable:
                return False
            result = self.notify.send(job)  # no lock held by a worker: only this receiver waits
            with self.lock:
                self._held_outcomes.append((job, result, self.clock.now()))
                self.notify.held.update(r.id for r in job.rows)
            if not self._write_outcomes():
                return False
        return True

    def _write_outcomes(self) -> bool:
        """Commit the held outcomes; True when none is left."""
        with self.lock:
            todo = list(self._held_outcomes)
            if not todo:
                return True
            try:
                with self._transaction("outcome", reload=False):
                    for job, result, at in todo:
                        self.notify.write_outcome(job, result, at)
                    self._save_limiters()  # an outcome changes only the outbox row and the budgets
            except StorageUnavailable:
                return False
            del self._held_outcomes[:len(todo)]
            for job, result, _ in todo:
                self.notify.held.difference_update(r.id for r in job.rows)
                self.notify.report(job, result)
            self.metrics.outbox_depth.set(self.outbox.depth())
            return not self._held_outcomes

    # -- delivery workers ---------------------------------------------------------------------------------
    def start_delivery(self) -> None:
        """One delivery thread per receiver from now on; ``tick`` stops sending itself."""
        with self.lock:
            if self._workers:
                return
            self._stopping.clear()
            for name in self.notifiers:
                self._wake[name] = threading.Event()
                self._workers[name] = threading.Thread(target=self._deliver_loop, args=(name,),
                                                       name=f"deliver-{name}", daemon=True)
            for t in self._workers.values():
                t.start()

    def stop_delivery(self, timeout: float = 1.0) -> None:
        """Ask the workers to stop and wait up to ``timeout`` in total; a worker stuck in a hanging HTTP
        call is left behind (a daemon thread): its row stays pending and is sent again later."""
        self._stopping.set()
        for wake in self._wake.values():
            wake.set()
        deadline = _monotonic() + timeout
        for t in self._workers.values():
            t.join(max(0.0, deadline - _monotonic()))
        with self.lock:
            self._workers, self._wake = {}, {}
            self._beats = {}

    def delivery_problems(self, stuck_after_s: float = 120.0) -> list[str]:
        """/healthz reasons: a delivery worker that died or has not finished a round for ``stuck_after_s``
        (longer than any receiver's timeout plus its retries within one round)."""
        out = []
        mono = _monotonic()
        for name, t in list(self._workers.items()):
            if not t.is_alive() and not self._stopping.is_set():
                out.append(f"delivery worker {name}: stopped")
            elif mono - self._beats.get(name, mono) > stuck_after_s:
                out.append(f"delivery worker {name}: stuck, no round finished for {mono - self._beats[name]:.0f}s")
        if self._held_outcomes:
            out.append(f"{self.db_name}: {len(self._held_outcomes)} delivery outcome(s) held in memory, not yet written")
        return out

    def _deliver_loop(self, receiver: str) -> None:
        wake = self._wake[receiver]
        failed_before = False
        while not self._stopping.is_set():
            wait = 1.0
            self._beats[receiver] = _monotonic()
            try:
                with self.lock:
                    jobs = self.notify.plan(self.clock.now(), receiver)
                sent = self._deliver(jobs, worker=True)
                if sent and jobs:
                    continue
                if sent:  # a write that failed waits out the round (1 s): no tight loop on a full disk
                    with self.lock:
                        now = self.clock.now()
                        nxt = self.notify.next_due(now, receiver)
                    if nxt is not None:
                        wait = min(1.0, max(0.01, nxt - now))
                failed_before = False
            except Exception as exc:  # the worker must outlive any one failure (e.g. a locked database)
                if self._stopping.is_set():
                    return
                if not failed_before:
                    log.error("receiver %s: delivery worker error (%s: %s); retrying", receiver,
                              type(exc).__name__, str(exc)[:200])
                failed_before = True
            wake.wait(wait)
            wake.clear()

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
        gone_inc = [fp for fp, inc in self.correlator.incidents.items()
                    if not inc.open and (inc.alert.ends_at or inc.alert.starts_at) < cutoff and fp not in routed]
        for fp in gone_inc:
            del self.correlator.incidents[fp]
        keep = self.correlator.referenced() | routed
        gone = [fp for fp, a in self.history.items()
                if a.status == "resolved" and (a.ends_at or a.starts_at) < cutoff and fp not in keep]
        for fp in gone:
            del self.history[fp]
        self.conn.executemany("DELETE FROM alerts WHERE fingerprint=?", [(fp,) for fp in gone])
        n = self.outbox.prune(cutoff)
        n += self.conn.execute("DELETE FROM silences WHERE ends_at<?", (cutoff,)).rowcount
        return bool(gone_inc or gone or n)

    def pending(self) -> bool:
        """Anything still to be sent: held alerts, groups with news, or queued notifications."""
        with self.lock:
            now = self.clock.now()
            return bool(self.correlator.held or self.dispatcher.next_due(self._muted_fn(now)) is not None
                        or self.outbox.depth())

    def drain(self, max_wait_s: float) -> bool:
        """Deliver everything pending, moving time forward (a SimulatedClock advances, a SystemClock
        sleeps); True when nothing is left to send."""
        deadline = self.clock.now() + max_wait_s
        while True:
            self.tick()
            with self.lock:
                now = self.clock.now()
                times = [t for t in (self.correlator.next_due(), self.dispatcher.next_due(self._muted_fn(now)),
                                     self.notify.next_due(now)) if t is not None]
            if not times:
                return True
            nxt = max(min(times), now)
            if nxt > deadline or (nxt <= now and now >= deadline):
                return False
            # nxt == now only when a delivery could not start (e.g. a two-message WeCom send with one slot
            # left); a short step lets the budget refill instead of spinning.
            self.clock.sleep(nxt - now if nxt > now else min(0.5, deadline - now))

    # -- JSON API for the monitor ----------------------------------------------------------------------
    def _trim_history(self) -> None:
        if len(self.history) > HISTORY:
            keep = self.correlator.referenced() | {a.fingerprint for a in self.dispatcher.active_alerts()}
            old = sorted((a for a in self.history.values() if a.fingerprint not in keep),
                         key=lambda a: (a.status == "firing", a.ends_at or a.starts_at))
            gone = old[: len(self.history) - HISTORY]
            for a in gone:
                self.history.pop(a.fingerprint, None)
            self.conn.executemany("DELETE FROM alerts WHERE fingerprint=?", [(a.fingerprint,) for a in gone])

    def alerts(self) -> list[dict[str, Any]]:
        with self.lock:
            now = self.clock.now()
            muted = self._muted_fn(now)
            out = []
            for a in self.history.values():
                if a.fingerprint in self.correlator.held:
                    state = "held"
                elif a.fingerprint in self.correlator.member_of:
                    state = "in_incident"
                else:
                    state = "suppressed" if muted(a) else "active"
                out.append(dict(a.to_json(), value=a.value, state=state))
            return out

    def incidents(self) -> list[dict[str, Any]]:
        with self.lock:
            return [inc.record() for inc in self.correlator.incidents.values()]

    def silences(self) -> list[dict[str, Any]]:
        with self.lock:
            now = self.clock.now()
            return [s.to_json(now) for s in self.silences_store.all()]

    def add_silence(self, matchers: Sequence[str | dict[str, Any]], duration_s: float | None = None,
                    ends_at: float | None = None, created_by: str = "verl-monitor", comment: str = "",
                    starts_at: float | None = None) -> str:
        """Matchers as ``name="value"`` strings or Alertmanager API v2 matcher objects. Raises ValueError."""
        with self.lock:
            now = self.clock.now()
            texts = [m if isinstance(m, str) else str(matcher_from_json(m)) for m in matchers]
            start = now if starts_at is None else starts_at
            end = ends_at if ends_at is not None else start + (duration_s if duration_s is not None else 3600.0)
            with self._transaction("silence", reload=False):
                sid = self.silences_store.add(texts, start, end, created_by, comment)
            self._save_silences()
            return sid

    def expire_silence(self, silence_id: str) -> bool:
        with self.lock:
            with self._transaction("silence", reload=False):
                done = self.silences_store.expire(silence_id, self.clock.now())
            self._save_silences()
            return done

    def _save_silences(self) -> None:
        try:
            self.silences_store.save_snapshot()
        except STORAGE_ERRORS as exc:
            self.health.failed("silences.json", "snapshot", exc)
        else:
            self.health.ok("silences.json")

    # -- durability --------------------------------------------------------------------------------------
    def _save(self) -> None:
        """Write the parts of the state that changed since the last save (and only those)."""
        incidents = self.correlator.incidents
        self.correlator.incidents = {}  # the snapshot without them; each incident has its own row
        try:
            corr = self.correlator.to_state()
        finally:
            self.correlator.incidents = incidents
        corr.pop("incidents", None)
        snapshot = {"correlator": corr, "router": self.dispatcher.to_state()}
        text = json.dumps(snapshot, sort_keys=True)
        if self._written.get("engine") != text:
            save_state(self.conn, "engine", snapshot)
            self._written["engine"] = text
        self._save_limiters()
        upserts = []
        for fp, inc in incidents.items():
            # An incident changes by resolving or by gaining members (they are never removed): this
            # signature spares re-serialising thousands of unchanged incidents on every save.
            sig = (id(inc.alert), inc.alert.status, inc.alert.ends_at, len(inc.members))
            if self._incident_sigs.get(fp) == sig:
                continue
            self._incident_sigs[fp] = sig
            row = json.dumps({"rule": inc.rule, "alert": inc.alert.to_json(), "join_key": inc.join_key,
                              "members": sorted(inc.members)}, sort_keys=True)  # Correlator.to_state's shape
            if self._written_incidents.get(fp) != row:
                upserts.append((fp, row))
                self._written_incidents[fp] = row
        gone = [fp for fp in self._written_incidents if fp not in incidents]
        for fp in gone:
            del self._written_incidents[fp]
            self._incident_sigs.pop(fp, None)
        if upserts:
            self.conn.executemany("INSERT INTO incidents(fingerprint, value) VALUES(?,?) ON CONFLICT(fingerprint) "
                                  "DO UPDATE SET value=excluded.value", upserts)
        if gone:
            self.conn.executemany("DELETE FROM incidents WHERE fingerprint=?", [(fp,) for fp in gone])

    def _save_limiters(self) -> None:
        limiters = {k: v.to_state() for k, v in self.notify.limiters.items()}
        text = json.dumps(limiters, sort_keys=True)
        if self._written.get("limiters") != text:
            save_state(self.conn, "limiters", limiters)
            self._written["limiters"] = text

    def _restore(self, with_limiters: bool = True) -> None:
        state = load_state(self.conn, "engine")
        rows = self.conn.execute("SELECT value FROM alerts ORDER BY seen_at").fetchall()
        self.history = {a.fingerprint: a for a in (alert_from_json(json.loads(r[0])) for r in rows)}
        corr = dict(state.get("correlator", {}))
        incidents = dict(corr.get("incidents", {}))  # snapshots before the incidents table held them inline
        for fp, value in self.conn.execute("SELECT fingerprint, value FROM incidents"):
            incidents[fp] = json.loads(value)
            self._written_incidents[fp] = value
        corr["incidents"] = incidents
        self.correlator.load_state(corr, self.history.get)

        def resolve(fp: str) -> Alert | None:
            inc = self.correlator.incidents.get(fp)
            return inc.alert if inc else self.history.get(fp)
        self.dispatcher.load_state(state.get("router", {}), resolve)
        if not with_limiters:
            return
        limiters = load_state(self.conn, "limiters") or state.get("limiters", {})  # older files: inside "engine"
        for k, v in limiters.items():
            if k in self.notify.limiters:
                self.notify.limiters[k].load_state(v)

    def close(self) -> None:
        if self._workers:
            self.stop_delivery()
        with self.lock:
            try:
                with self._transaction("close", reload=False):
                    self._save()
            except StorageUnavailable:
                pass  # already counted and logged; what was committed before stands
            for n in self.notifiers.values():
                n.close()
            self.conn.close()
