from __future__ import annotations

from alerting.model import Alert, Notification
from alerting.templates import fit_bytes, humanize, render
from tests.alerting.helpers import T0, alert

INCIDENT = Alert(labels={"alertname": "DataflowCollapse", "severity": "P0", "cluster": "llama3-1k-gpu",
                         "node": "gpu-08"},
                 annotations={"root_cause": "Reward Model OOM on node gpu-08 (A100-80G)",
                              "suggestion": "Reduce reward_batch_size from 64 to 32, or add --offload_reward_to_cpu"},
                 starts_at=T0)


def note(*alerts: Alert, status: str = "firing") -> Notification:
    return Notification("r", "g", {}, status, list(alerts), [a.fingerprint for a in alerts], T0)  # type: ignore[arg-type]


def test_article_layout_en() -> None:
    out = render([note(INCIDENT)])
    assert out.text.splitlines() == [
        "【verl-alert】P0: Dataflow Collapse",
        "Cluster: llama3-1k-gpu",
        "Time: 2025-04-12 14:23:17 UTC",
        "Root Cause: Reward Model OOM on node gpu-08 (A100-80G)",
        "Suggestion: Reduce reward_batch_size from 64 to 32, or add --offload_reward_to_cpu",
    ]
    assert out.title == "【verl-alert】P0: Dataflow Collapse" and not out.fell_back


def test_zh_cn_and_resolved_first_line() -> None:
    lines = render([note(INCIDENT)], lang="zh-CN").text.splitlines()
    assert lines[1:4] == ["集群: llama3-1k-gpu", "时间: 2025-04-12 14:23:17 UTC",
                          "根因: Reward Model OOM on node gpu-08 (A100-80G)"]
    resolved = Alert(INCIDENT.labels, INCIDENT.annotations, T0, T0 + 60, "resolved")
    assert render([note(resolved, status="resolved")]).title == "【verl-alert】RESOLVED P0: Dataflow Collapse"
    assert render([note(resolved, status="resolved")], lang="zh-CN").title.startswith("【verl-alert】已恢复 P0")


def test_user_template_and_hostile_template_falls_back() -> None:
    ok = render([note(INCIDENT)], template="ALERT {{ severity }} {{ title }} on {{ cluster }}")
    assert ok.text == "ALERT P0 Dataflow Collapse on llama3-1k-gpu" and not ok.fell_back
    for hostile in ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "{{ alerts[0].x.y.__globals__ }}",
                    "{% for %}", "{{ 1 // 0 }}"):
        out = render([note(INCIDENT)], template=hostile)
        assert out.fell_back and out.title == "【verl-alert】P0: Dataflow Collapse", hostile


def test_truncation_by_utf8_bytes_with_more_link() -> None:
    many = [alert("GPUOverTemperature", severity="P2", gpu=str(i), node=f"节点-{i:03d}") for i in range(300)]
    out = render([note(*many)], link="http://mon/api/v1/alerts", max_bytes=4096)
    size = len(out.text.encode("utf-8"))
    assert size <= 4096 and size > 3000
    last = out.text.splitlines()[-1]
    assert last.startswith("+") and last.endswith("more: http://mon/api/v1/alerts")
    shown = out.text.count("GPU Over Temperature node=节点-")
    assert shown + int(last[1:].split()[0]) == 300


def test_fit_bytes_never_splits_a_character() -> None:
    assert fit_bytes("告警告警", 7) == "告警"
    assert humanize("RewardModelOOM") == "Reward Model OOM" and humanize("GPUXidError") == "GPU Xid Error"
