from __future__ import annotations

from alerting.config import InhibitRule, parse_config
from alerting.dispatch import Dispatcher, match_routes
from alerting.inhibit import Inhibitor
from alerting.matchers import parse_matcher
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


def test_match_routes_continue_and_fallback() -> None:
    names = lambda labels: [r.receiver for r in match_routes(CFG.route, labels)]  # noqa: E731
    assert names({"alertname": "GPUXidError", "severity": "P1"}) == ["oncall", "gpu"]
    assert names({"alertname": "GPUOverTemperature", "severity": "P2"}) == ["gpu"]
    assert names({"alertname": "ThroughputDrop", "severity": "P2"}) == ["default"]


def test_group_wait_interval_and_repeat() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    r.add(alert("ThroughputDrop", severity="P2"), 0)
    assert r.flush_due(29, never, expand) == []
    (n,) = r.flush_due(30, never, expand)
    assert n.receiver == "default" and n.status == "firing" and len(n.alerts) == 1
    r.add(alert("ThroughputDrop", severity="P2", node="gpu-09"), 40)  # same group? no: node is in group_by
    assert r.flush_due(70, never, expand)[0].group_labels["node"] == "gpu-09"
    assert r.flush_due(330, never, expand) == []  # nothing new at group_interval
    assert r.flush_due(30 + 4 * 3600, never, expand)[0].status == "firing"  # repeat_interval


def test_grouping_folds_alerts_and_resolved_is_notified_once() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    for gpu in "0123":
        r.add(alert("GPUOverTemperature", severity="P2", gpu=gpu), 0)
    (n,) = r.flush_due(30, never, expand)
    assert n.receiver == "gpu" and len(n.alerts) == 4 and n.group_labels == {"alertname": "GPUOverTemperature"}
    r.add(alert("GPUOverTemperature", severity="P2", gpu="0", status="resolved"), 100)
    (n,) = r.flush_due(330, never, expand)
    assert n.status == "firing" and [a.status for a in n.alerts].count("resolved") == 1
    assert r.flush_due(630, never, expand) == []
    for gpu in "123":
        r.add(alert("GPUOverTemperature", severity="P2", gpu=gpu, status="resolved"), 700)
    (n,) = r.flush_due(930, never, expand)
    assert n.status == "resolved" and len(n.alerts) == 3
    assert not r.groups and not r.nflog


def test_muted_alerts_notify_when_mute_lifts() -> None:
    r = Dispatcher(CFG.route, CFG.receivers)
    r.add(alert("ThroughputDrop", severity="P2"), 0)
    assert r.flush_due(30, lambda a: True, expand) == []
    assert r.next_due(never) == 330
    assert len(r.flush_due(330, never, expand)) == 1


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
    a = alert("ThroughputDrop", severity="P2")
    r.add(a, 0)
    r.flush_due(30, never, expand)
    r2 = Dispatcher(CFG.route, CFG.receivers)
    r2.load_state(r.to_state(), {a.fingerprint: a}.get)
    assert list(r2.groups.values())[0].alerts == {a.fingerprint: a}
    r2.add(alert("ThroughputDrop", severity="P2"), 100)  # the same alert again after a restart
    assert r2.flush_due(330, never, expand) == []


def test_group_by_all_labels_makes_one_group_per_alert() -> None:
    cfg = parse_config({"receivers": [{"name": "w", "type": "webhook", "url": "http://127.0.0.1:1/"}],
                        "route": {"receiver": "w", "group_by": ["..."], "group_wait": "0s"}})
    r = Dispatcher(cfg.route, cfg.receivers)
    for gpu in "01":
        r.add(alert("GPUXidError", gpu=gpu), 0)
    notes = r.flush_due(0, never, expand)
    assert len(notes) == 2 and {n.group_labels["gpu"] for n in notes} == {"0", "1"}
