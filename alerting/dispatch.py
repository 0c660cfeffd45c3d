"""Dispatch stage, named as in Alertmanager (its ``dispatch`` package: route tree + aggregation groups):
match alerts down the route tree on their labels alone, keep them in aggregation groups by
``group_by``, and say which groups are due on their timers -- first after ``group_wait``, then every
``group_interval``. A due group's alerts then pass the flush stages (``alerting.stages``: inhibit ->
silence -> dedup with its notification log and repeat interval)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from alerting.config import ReceiverConfig, RouteConfig
from alerting.matchers import all_match
from alerting.model import Alert


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


class Dispatcher:
    def __init__(self, route: RouteConfig, receivers: dict[str, ReceiverConfig]) -> None:
        self.root = route
        self.receivers = receivers
        self.routes = {r.path: r for r in walk(route)}
        self.groups: dict[str, Group] = {}

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

    def active_alerts(self) -> list[Alert]:
        return [a for g in self.groups.values() for a in g.alerts.values()]

    def due(self, now: float) -> list[Group]:
        """The groups whose flush timer has fired, earliest first."""
        return [self.groups[k] for k in sorted(self.groups, key=lambda k: (self.groups[k].next_flush, k))
                if self.groups[k].next_flush <= now]

    def flushed(self, group: Group, now: float) -> bool:
        """After ``group``'s flush: its next timer, its resolved alerts dropped; True when it emptied
        and is gone (its notification log entry goes with it)."""
        interval = self.routes[group.route_path].group_interval_s
        resend = self.receivers[group.receiver].resend_interval_s
        group.next_flush = now + (min(interval, resend) if resend else interval)
        for fp in [fp for fp, a in group.alerts.items() if a.status == "resolved"]:
            del group.alerts[fp]
        if group.alerts:
            return False
        del self.groups[group.key]
        return True

    def next_flush(self) -> float | None:
        """Earliest flush of any group (repeats included): when the dispatcher's timer must next run."""
        return min((g.next_flush for g in self.groups.values()), default=None)

    def to_state(self) -> dict[str, Any]:
        return {
            "groups": {k: {"route_path": g.route_path, "receiver": g.receiver, "labels": g.labels,
                           "next_flush": g.next_flush,
                           "alerts": list(g.alerts)}
                       for k, g in self.groups.items()},
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


def walk(route: RouteConfig) -> list[RouteConfig]:
    """The route and all routes below it."""
    return [route] + [r for c in route.routes for r in walk(c)]
