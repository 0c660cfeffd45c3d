"""Dispatch stage, named as in Alertmanager (its ``dispatch`` package: route tree + aggregation groups):
match alerts down the route tree, keep them in
aggregation groups by ``group_by``, and flush each group on its timers -- first after ``group_wait``,
then every ``group_interval`` when something changed, and again after ``repeat_interval`` when nothing
did. A notification log per group decides what is new, so a restart does not notify twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from alerting.config import ReceiverConfig, RouteConfig
from alerting.matchers import all_match
from alerting.model import Alert, Notification


def match_routes(route: RouteConfig, labels: dict[str, str]) -> list[RouteConfig]:
    """Depth-first: the deepest matching routes; siblings after a match only with ``continue``."""
    if not all_match(route.matchers, labels):
        return []
    found: list[RouteConfig] = []
    for child in route.routes:
        hit = match_routes(child, labels)
        if hit:
            found.extend(hit)
            if not child.continue_:
                break
    return found or [route]


@dataclass
class Group:
    key: str
    route_path: str
    receiver: str
    labels: dict[str, str]
    alerts: dict[str, Alert] = field(default_factory=dict)
    next_flush: float = 0.0


@dataclass
class NotifyLog:
    firing: list[str]
    resolved: list[str]
    at: float


class Dispatcher:
    def __init__(self, route: RouteConfig, receivers: dict[str, ReceiverConfig]) -> None:
        self.root = route
        self.receivers = receivers
        self.routes = {r.path: r for r in _walk(route)}
        self.groups: dict[str, Group] = {}
        self.nflog: dict[str, NotifyLog] = {}

    def add(self, alert: Alert, now: float) -> None:
        for route in match_routes(self.root, alert.labels):
            if "..." in route.group_by:
                labels = dict(alert.labels)
            else:
                labels = {k: alert.labels[k] for k in route.group_by if k in alert.labels}
            key = f"{route.path}/{route.receiver}:" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = Group(key, route.path, route.receiver, labels,
                                                 next_flush=now + route.group_wait_s)
            group.alerts[alert.fingerprint] = alert

    def unpaged(self, fp: str, muted: Callable[[Alert], bool]) -> bool:
        """True while ``fp`` fires unmuted in a group whose notification log has not sent it yet."""
        for g in self.groups.values():
            a = g.alerts.get(fp)
            if a is not None and a.status == "firing" and not muted(a):
                log = self.nflog.get(g.key)
                if log is None or fp not in log.firing:
                    return True
        return False

    def active_alerts(self) -> list[Alert]:
        return [a for g in self.groups.values() for a in g.alerts.values()]

    def _plan(self, group: Group, now: float, muted: Callable[[Alert], bool]) -> tuple[list[Alert], bool]:
        log = self.nflog.get(group.key)
        notified_firing = set(log.firing) if log else set()
        notified_resolved = set(log.resolved) if log else set()
        live = [a for a in group.alerts.values() if not muted(a)]
        firing = [a for a in live if a.status == "firing"]
        # A resolve goes out only for a page that went out (Alertmanager's notification log does the same):
        # an alert that fired and cleared inside group_wait, or whose page was never sent, stays quiet.
        resolved = [a for a in live if a.status == "resolved" and a.fingerprint in notified_firing
                    and a.fingerprint not in notified_resolved]
        if not self.receivers[group.receiver].send_resolved:
            resolved = []
        repeat = self._repeat_s(group)
        needs = bool({a.fingerprint for a in firing} - notified_firing) or bool(resolved) or (
            bool(firing) and log is not None and now >= log.at + repeat)
        return firing + resolved, needs

    def _repeat_s(self, group: Group) -> float:
        """An Alertmanager receiver gets its firing alerts again every ``resend_interval`` (as from
        Prometheus), or Alertmanager would resolve them while they still fire; others every repeat_interval."""
        repeat = self.routes[group.route_path].repeat_interval_s
        resend = self.receivers[group.receiver].resend_interval_s
        return min(repeat, resend) if resend else repeat

    def flush_due(self, now: float, muted: Callable[[Alert], bool],
                  expand: Callable[[Alert], list[str]]) -> list[Notification]:
        out: list[Notification] = []
        for key in sorted(self.groups, key=lambda k: (self.groups[k].next_flush, k)):
            group = self.groups[key]
            if group.next_flush > now:
                continue
            alerts, needs = self._plan(group, now, muted)
            if needs:
                firing = [a.fingerprint for a in alerts if a.status == "firing"]
                old = self.nflog.get(key)
                self.nflog[key] = NotifyLog(firing, sorted(set(old.resolved if old else []) |
                                                           {a.fingerprint for a in alerts if a.status == "resolved"}), now)
                fps = [fp for a in alerts for fp in expand(a)]
                out.append(Notification(group.receiver, key, dict(group.labels),
                                        "firing" if firing else "resolved", list(alerts), fps, now))
            interval = self.routes[group.route_path].group_interval_s
            resend = self.receivers[group.receiver].resend_interval_s
            group.next_flush = now + (min(interval, resend) if resend else interval)
            for fp in [fp for fp, a in group.alerts.items() if a.status == "resolved"]:
                del group.alerts[fp]
            if not group.alerts:
                del self.groups[key]
                self.nflog.pop(key, None)
        return out

    def next_flush(self) -> float | None:
        """Earliest flush of any group (repeats included): when the dispatcher's timer must next run."""
        return min((g.next_flush for g in self.groups.values()), default=None)

    def next_due(self, muted: Callable[[Alert], bool]) -> float | None:
        """Earliest flush that would send something new (repeats excluded), for ``drain``."""
        return min((g.next_flush for g in self.groups.values() if self._has_news(g, muted)), default=None)

    def _has_news(self, group: Group, muted: Callable[[Alert], bool]) -> bool:
        log = self.nflog.get(group.key)
        firing, resolved = (set(log.firing), set(log.resolved)) if log else (set(), set())
        send_resolved = self.receivers[group.receiver].send_resolved
        return any(not muted(a) and ((a.status == "firing" and a.fingerprint not in firing) or
                                     (a.status == "resolved" and send_resolved and a.fingerprint in firing
                                      and a.fingerprint not in resolved))
                   for a in group.alerts.values())

    def to_state(self) -> dict[str, Any]:
        return {
            "groups": {k: {"route_path": g.route_path, "receiver": g.receiver, "labels": g.labels,
                           "next_flush": g.next_flush,
                           "alerts": list(g.alerts)}
                       for k, g in self.groups.items()},
            "nflog": {k: {"firing": v.firing, "resolved": v.resolved, "at": v.at} for k, v in self.nflog.items()},
        }

    def load_state(self, state: dict[str, Any], resolve: Callable[[str], Alert | None]) -> None:
        """``resolve`` finds an alert by fingerprint in the engine's alert table (the state holds only
        fingerprints, so saving stays cheap however many alerts a group has)."""
        self.groups = {}
        for k, g in state.get("groups", {}).items():
            if g["route_path"] not in self.routes or g["receiver"] not in self.receivers:
                continue  # the config changed under a restart; its alerts come back with the next evaluation
            alerts = [a for a in map(resolve, g["alerts"]) if a is not None]
            self.groups[k] = Group(k, g["route_path"], g["receiver"], dict(g["labels"]),
                                   {a.fingerprint: a for a in alerts}, float(g["next_flush"]))
        self.nflog = {k: NotifyLog(list(v["firing"]), list(v["resolved"]), float(v["at"]))
                      for k, v in state.get("nflog", {}).items()}


def _walk(route: RouteConfig) -> list[RouteConfig]:
    return [route] + [r for c in route.routes for r in _walk(c)]
