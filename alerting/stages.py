"""The flush of a group as one pipeline of stages with one interface, as Alertmanager's notify pipeline
runs for each flushed aggregation group: route/group (``alerting.dispatch``: which groups are due) ->
inhibit -> silence -> dedup (notification log, repeat interval) -> outbox. Each stage takes the group's
alerts and returns the ones that go on; an empty list ends the flush of that group.

``MuteStage`` is Alertmanager's ``MuteStage``: built once with a muter (the inhibitor or the silences),
asked once per flush for its predicate (the inhibitor indexes the firing sources, the silences their
matchers). ``DedupStage`` holds the notification log: what each group last sent, so nothing is sent
twice -- not even after a restart -- and a firing group is sent again after ``repeat_interval``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from alerting.config import ReceiverConfig, RouteConfig
from alerting.dispatch import Dispatcher, Group, walk
from alerting.model import Alert, Notification

Muting = Callable[[Alert], bool]


class Stage(Protocol):
    def begin(self, now: float) -> None:
        """Once per flush, before the groups pass."""

    def run(self, group: Group, alerts: list[Alert], now: float) -> list[Alert]:
        """The alerts of ``group`` that go on to the next stage."""


class MuteStage:
    """Drops the alerts its muter mutes (``muter(now)`` -> predicate, asked once per flush)."""

    def __init__(self, name: str, muter: Callable[[float], Muting]) -> None:
        self.name = name
        self.muter = muter
        self._muted: Muting = lambda a: False

    def begin(self, now: float) -> None:
        self._muted = self.muter(now)

    def run(self, group: Group, alerts: list[Alert], now: float) -> list[Alert]:
        muted = self._muted
        return [a for a in alerts if not muted(a)]


@dataclass
class NotifyLog:
    firing: list[str]
    resolved: list[str]
    at: float


class DedupStage:
    """What each group last sent: passes a group's alerts on only when something is new (a firing alert
    not sent yet, a resolve of a sent page) or ``repeat_interval`` passed; records what goes on."""

    name = "dedup"

    def __init__(self, route: RouteConfig, receivers: dict[str, ReceiverConfig]) -> None:
        self.routes = {r.path: r for r in walk(route)}
        self.receivers = receivers
        self.log: dict[str, NotifyLog] = {}

    def begin(self, now: float) -> None:
        pass

    def _plan(self, group: Group, alerts: list[Alert], now: float) -> tuple[list[Alert], bool]:
        log = self.log.get(group.key)
        notified_firing = set(log.firing) if log else set()
        notified_resolved = set(log.resolved) if log else set()
        firing = [a for a in alerts if a.status == "firing"]
        # A resolve goes out only for a page that went out (Alertmanager's notification log does the same):
        # an alert that fired and cleared inside group_wait, or whose page was never sent, stays quiet.
        resolved = [a for a in alerts if a.status == "resolved" and a.fingerprint in notified_firing
                    and a.fingerprint not in notified_resolved]
        if not self.receivers[group.receiver].send_resolved:
            resolved = []
        needs = bool({a.fingerprint for a in firing} - notified_firing) or bool(resolved) or (
            bool(firing) and log is not None and now >= log.at + self._repeat_s(group))
        return firing + resolved, needs

    def _repeat_s(self, group: Group) -> float:
        """An Alertmanager receiver gets its firing alerts again every ``resend_interval`` (as from
        Prometheus), or Alertmanager would resolve them while they still fire; others every repeat_interval."""
        repeat = self.routes[group.route_path].repeat_interval_s
        resend = self.receivers[group.receiver].resend_interval_s
        return min(repeat, resend) if resend else repeat

    def run(self, group: Group, alerts: list[Alert], now: float) -> list[Alert]:
        out, needs = self._plan(group, alerts, now)
        if not needs:
            return []
        old = self.log.get(group.key)
        self.log[group.key] = NotifyLog([a.fingerprint for a in out if a.status == "firing"],
                                        sorted(set(old.resolved if old else []) |
                                               {a.fingerprint for a in out if a.status == "resolved"}), now)
        return out

    def has_news(self, group: Group, alerts: list[Alert]) -> bool:
        """Something new to send (repeats excluded), for ``drain``."""
        log = self.log.get(group.key)
        firing, resolved = (set(log.firing), set(log.resolved)) if log else (set(), set())
        send_resolved = self.receivers[group.receiver].send_resolved
        return any((a.status == "firing" and a.fingerprint not in firing) or
                   (a.status == "resolved" and send_resolved and a.fingerprint in firing
                    and a.fingerprint not in resolved) for a in alerts)

    def sent(self, group: Group, fp: str) -> bool:
        log = self.log.get(group.key)
        return log is not None and fp in log.firing

    def forget(self, key: str) -> None:
        self.log.pop(key, None)

    def to_state(self) -> dict[str, Any]:
        return {k: {"firing": v.firing, "resolved": v.resolved, "at": v.at} for k, v in self.log.items()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.log = {k: NotifyLog(list(v["firing"]), list(v["resolved"]), float(v["at"])) for k, v in state.items()}


class Flush:
    """The dispatcher's due groups through the stages, built once: ``mutes`` (inhibit, silence) then
    the notification log; what comes out becomes a ``Notification`` for the outbox."""

    def __init__(self, dispatcher: Dispatcher, mutes: list[MuteStage], dedup: DedupStage) -> None:
        self.dispatcher = dispatcher
        self.mutes = mutes
        self.dedup = dedup
        self.stages: list[Stage] = [*mutes, dedup]

    def _unmuted(self, group: Group, now: float) -> list[Alert]:
        alerts = list(group.alerts.values())
        for stage in self.mutes:
            alerts = stage.run(group, alerts, now)
        return alerts

    def due(self, now: float, expand: Callable[[Alert], list[str]]) -> list[Notification]:
        """``expand``: the fingerprints an alert carries (an incident: its members too)."""
        for stage in self.stages:
            stage.begin(now)
        out: list[Notification] = []
        for group in self.dispatcher.due(now):
            alerts = list(group.alerts.values())
            for stage in self.stages:
                alerts = stage.run(group, alerts, now)
                if not alerts:
                    break
            if alerts:
                status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
                out.append(Notification(group.receiver, group.key, dict(group.labels), status, alerts,
                                        [fp for a in alerts for fp in expand(a)], now))
            if self.dispatcher.flushed(group, now):
                self.dedup.forget(group.key)
        return out

    def next_news(self, now: float) -> float | None:
        """Earliest flush that would send something new (repeats excluded), for ``drain``."""
        for stage in self.mutes:
            stage.begin(now)
        return min((g.next_flush for g in self.dispatcher.groups.values()
                    if self.dedup.has_news(g, self._unmuted(g, now))), default=None)

    def unpaged(self, fp: str, now: float) -> bool:
        """True while ``fp`` fires unmuted in a group that has not sent it yet."""
        for stage in self.mutes:
            stage.begin(now)
        for g in self.dispatcher.groups.values():
            a = g.alerts.get(fp)
            if a is not None and a.status == "firing" and not self.dedup.sent(g, fp) \
                    and all(stage.run(g, [a], now) for stage in self.mutes):
                return True
        return False
