"""Alertmanager behind the router, by its client contract: firing alerts carry a future endsAt and are
re-posted every resend_interval while they fire; resolved ones carry their real endsAt. Plus the
identity fingerprint shared with Prometheus' alerts, and runbook links that open from a phone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alerting.clock import SimulatedClock
from alerting.config import AlertingConfigError, parse_config
from alerting.model import Alert, Notification, parse_rfc3339
from alerting.notifiers import build_notifier
from alerting.templates import render, runbook_link
from tests.alerting.helpers import T0, Harness, alert, make_config, receiver


def test_fingerprint_ignores_scrape_plumbing() -> None:
    own = alert("TrainerDown", severity="P0", node="127.0.0.1")
    via_prometheus = alert("TrainerDown", severity="P0", node="127.0.0.1", job="verl-trainer",
                           instance="127.0.0.1:8000", prometheus="monitoring/k8s", endpoint="metrics",
                           pod="trainer-0")
    assert own.fingerprint == via_prometheus.fingerprint
    assert own.fingerprint != alert("TrainerDown", severity="P0", node="gpu-09").fingerprint
    assert own.fingerprint != alert("TrainerDown", severity="P0", node="127.0.0.1", gpu="0").fingerprint


def _am(cfg_extra: dict[str, Any] | None = None) -> Any:
    return parse_config({"receivers": [{"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9093",
                                        **(cfg_extra or {})}]}).receivers["am"]


def test_resend_interval_defaults_and_checks() -> None:
    assert _am().resend_interval_s == 60.0
    assert _am({"resend_interval": "15s"}).resend_interval_s == 15.0
    with pytest.raises(AlertingConfigError, match=r"receivers\[0\].resend_interval: must be > 0"):
        _am({"resend_interval": 0})
    with pytest.raises(AlertingConfigError, match="only for type alertmanager"):
        parse_config({"receivers": [{"name": "w", "type": "webhook", "url": "http://x", "resend_interval": "1m"}]})


class _Wall:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_postable_alerts_end_in_the_future_while_firing_and_really_when_resolved(fakes: dict[str, Any]) -> None:
    wh = fakes["webhook"]
    cfg = parse_config({"receivers": [{"name": "am", "type": "alertmanager", "url": wh.base,
                                       "resend_interval": "1m"}]}).receivers["am"]
    am = build_notifier(cfg, sign_clock=_Wall(T0 + 30))
    am.external_url = "http://mon:9105"  # type: ignore[attr-defined]
    firing = alert("GPUXidError", gpu="3")
    resolved = Alert(dict(firing.labels), {"summary": "s", "runbook": "r"}, starts_at=T0, ends_at=T0 + 20,
                     status="resolved", generator_url="http://prom:9090/graph?g0.expr=x")
    incident = Alert({"alertname": "DataflowCollapse", "severity": "P0", "cluster": "c", "node": "gpu-08"},
                     {"root_cause": "Reward Model OOM on node gpu-08", "suggestion": "Reduce reward_batch_size"},
                     starts_at=T0)
    notes = [Notification("am", "g", {}, "firing", [firing, incident], [firing.fingerprint], T0 + 10)]
    assert am.send(render(notes), notes).ok
    notes = [Notification("am", "g2", {}, "resolved", [resolved], [resolved.fingerprint], T0 + 25)]
    assert am.send(render(notes), notes).ok
    am.close()
    (first, inc), (done,) = wh.received[0].body, wh.received[1].body
    assert wh.received[0].path == "/api/v2/alerts"
    assert parse_rfc3339(first["endsAt"]) == T0 + 30 + 180  # 3 x resend_interval after the send
    assert parse_rfc3339(first["startsAt"]) == T0
    assert first["generatorURL"] == f"http://mon:9105/api/v1/alerts/{firing.fingerprint}"
    assert first["annotations"]["description"]  # the summary, when a rule has no description
    assert inc["annotations"]["description"] == "Reward Model OOM on node gpu-08 Reduce reward_batch_size"
    assert parse_rfc3339(done["endsAt"]) == T0 + 20  # the real end, not the send time
    assert done["generatorURL"] == "http://prom:9090/graph?g0.expr=x"  # an incoming alert keeps its own
    assert set(first) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}


def test_firing_alerts_are_reposted_every_resend_interval_until_resolved(
        tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    am, chat = fakes["webhook"], fakes["dingtalk"]
    cfg = make_config([receiver("webhook", am, name="am", type="alertmanager", url=am.base, resend_interval="1m"),
                       receiver("dingtalk", chat, name="chat")],
                      group_wait="0s", routes=[{"matchers": ['alertname=~".+"'], "receiver": "am", "continue": True},
                                               {"matchers": ['alertname=~".+"'], "receiver": "chat"}])
    h = Harness(tmp_path, cfg, clock)
    a = alert("GPUXidError", gpu="3")
    h.engine.submit([a])
    for _ in range(10 * 60):  # ten minutes, one tick a second
        h.engine.tick()
        clock.advance(1.0)
    posts = [r for r in am.received if r.path == "/api/v2/alerts"]
    assert 10 <= len(posts) <= 11  # once at once, then every minute
    gaps = [b.at - a_.at for a_, b in zip(posts, posts[1:], strict=False)]
    assert all(55 <= g <= 65 for g in gaps), gaps
    assert len(chat.received) == 1  # the chat receiver still pages once (repeat_interval 4h)
    h.engine.submit([Alert(dict(a.labels), dict(a.annotations), starts_at=a.starts_at, ends_at=clock.now(),
                           status="resolved")])
    for _ in range(5 * 60):
        h.engine.tick()
        clock.advance(1.0)
    after = [r for r in am.received if r.path == "/api/v2/alerts"][len(posts):]
    assert len(after) == 1 and after[0].body[0]["endsAt"] != "0001-01-01T00:00:00Z"
    assert len(chat.received) == 2  # and one resolved message
    h.engine.close()


def test_repo_relative_runbooks_become_links() -> None:
    base = "https://git.example.com/verl-ops/blob/main/"
    assert runbook_link("prometheus/README.md#trainerdown", base) == base + "prometheus/README.md#trainerdown"
    assert runbook_link("prometheus/README.md#trainerdown", "") == "prometheus/README.md#trainerdown"
    assert runbook_link("Check the reward model's GPU.", base) == "Check the reward model's GPU."
    assert runbook_link("https://wiki/x.md", base) == "https://wiki/x.md"
    a = Alert({"alertname": "TrainerDown", "severity": "P0", "cluster": "c", "node": "n"},
              {"summary": "down", "runbook": "prometheus/README.md#trainerdown"}, starts_at=T0)
    text = render([Notification("r", "g", {}, "firing", [a], [a.fingerprint], T0)], runbook_base=base).text
    assert f"Runbook: {base}prometheus/README.md#trainerdown" in text
    with pytest.raises(AlertingConfigError, match="runbook_base_url"):
        parse_config({"receivers": [{"name": "w", "type": "webhook", "url": "http://x"}],
                      "runbook_base_url": "git.example.com"})
