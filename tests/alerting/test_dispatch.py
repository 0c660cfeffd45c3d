from __future__ import annotations

from alerting.config import AlertingConfig, InhibitRule, parse_config
from alerting.dispatch import Dispatcher, match_routes
from alerting.inhibit import Inhibitor
from alerting.matchers import parse_matcher
from alerting.model import Notification
from alerting.stages import DedupStage, Flush, MuteStage
from tests.alerting.helpers import alert

CFG = parse_config({
    "receivers": [{"name": n, "type": "webhook", "url": "http://127.0.0.1:1/"} for n in ("default", "oncall", "gpu")],
    "route": {"receiver": "default", "group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h",
              "routes": [{"matchers": ['severity=~"P0|P1"'], "receiver": "oncall", "continue": True},
                         {"matchers": ['alertname=~"GPU.*"'], "receiver": "gpu", "group_by": ["alertname"]}]},
})


def never(_a: object) -> bool:
    return False


def expand(a):  # noqa: ANN001, ANN201
    return [a.fingerprint]


class Stages:
    """The flush stages over one dispatcher: a mute stage whose predicate a test sets, then dedup."""

    def __init__(self, r: Dispatcher, cfg: AlertingConfig = CFG) -> None:
        self.muted = never
        self.flush = Flush(r, [MuteStage("mute", lambda now: self.muted)], DedupStage(cfg.route, cfg.receivers))

    def due(self, now: float, muted=never) -> list[Notification]:  # noqa: ANN001
        self.muted = muted
        return self.flush.due(now, expand)


def test_match_routes_continue_and_fallback() -> None:
    names = lambda labels: [r.receiver for r in match_routes(CFG.route, labels)]  # noqa: E731
    assert names({"alertname": "GPUXidError", "severity": "P1"}) == ["oncall", "gpu"]
    assert names({"alertname": "GPUOverTemperature", "severity": "P2"}) == ["gpu"]
    assert names({"alertname": "ThroughputDrop", "severity": "P2"}) == ["default"]


def test_group_wait_interval_and_repeat() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    f = Stages(r)
    r.add(alert("ThroughputDrop", severity="P2"), 0)
    assert f.due(29) == []
    (n,) = f.due(30)
    assert n.receiver == "default" and n.status == "firing" and len(n.alerts) == 1
    r.add(alert("ThroughputDrop", severity="P2", node="gpu-09"), 40)  # same group? no: node is in group_by
    assert f.due(70)[0].group_labels["node"] == "gpu-09"
    assert f.due(330) == []  # nothing new at group_interval
    assert f.due(30 + 4 * 3600)[0].status == "firing"  # repeat_interval


def test_grouping_folds_alerts_and_resolved_is_notified_once() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    f = Stages(r)
    for gpu in "0123":
        r.add(alert("GPUOverTemperature", severity="P2", gpu=gpu), 0)
    (n,) = f.due(30)
    assert n.receiver == "gpu" and len(n.alerts) == 4 and n.group_labels == {"alertname": "GPUOverTemperature"}
    r.add(alert("GPUOverTemperature", severity="P2", gpu="0", status="resolved"), 100)
    (n,) = f.due(330)
    assert n.status == "firing" and [a.status for a in n.alerts].count("resolved") == 1
    assert f.due(630) == []
    for gpu in "123":
        r.add(alert("GPUOverTemperature", severity="P2", gpu=gpu, status="resolved"), 700)
    (n,) = f.due(930)
    assert n.status == "resolved" and len(n.alerts) == 3
    assert not r.groups and not f.flush.dedup.log


def test_muted_alerts_notify_when_mute_lifts() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    f = Stages(r)
    r.add(alert("ThroughputDrop", severity="P2"), 0)
    assert f.due(30, lambda a: True) == []
    f.muted = never  # the mute lifts
    assert f.flush.next_news(30) == 330
    assert len(f.due(330)) == 1


def test_inhibition_by_equal_labels() -> None:
    inh = Inhibitor([InhibitRule([parse_matcher('severity="P0"')], [parse_matcher('severity=~"P2|P3"')],
                                 ["node"])])
    p0 = alert("TrainingStalled", severity="P0")
    assert inh.muting([p0])(alert("ThroughputDrop", severity="P2"))
    assert not inh.muting([p0])(alert("ThroughputDrop", severity="P2", node="gpu-01"))
    assert not inh.muting([p0])(alert("GPUXidError", severity="P1"))
    resolved_p0 = alert("TrainingStalled", severity="P0", status="resolved")
    assert not inh.muting([resolved_p0])(alert("ThroughputDrop", severity="P2"))


def test_router_state_round_trip() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    f = Stages(r)
    a = alert("ThroughputDrop", severity="P2")
    r.add(a, 0)
    f.due(30)
    r2 = Dispatcher(CFG.route, CFG.receivers)
    f2 = Stages(r2)
    r2.load_state(r.to_state(), {a.fingerprint: a}.get)
    f2.flush.dedup.load_state(f.flush.dedup.to_state())
    assert list(r2.groups.values())[0].alerts == {a.fingerprint: a}
    r2.add(alert("ThroughputDrop", severity="P2"), 100)  # the same alert again after a restart
    assert f2.due(330) == []


def test_group_by_all_labels_makes_one_group_per_alert() -> None:
    cfg = parse_config({"receivers": [{"name": "w", "type": "webhook", "url": "http://127.0.0.1:1/"}],
                        "route": {"receiver": "w", "group_by": ["..."], "group_wait": "0s"}})
    r = Dispatcher(cfg.route, cfg.receivers)
    f = Stages(r, cfg)
    for gpu in "01":
        r.add(alert("GPUXidError", gpu=gpu), 0)
    notes = f.due(0)
    assert len(notes) == 2 and {n.group_labels["gpu"] for n in notes} == {"0", "1"}
