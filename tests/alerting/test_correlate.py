from __future__ import annotations

from pathlib import Path

import pytest

from alerting.config import DEFAULT_RULES, AlertingConfigError
from alerting.correlate import Correlator, load_rules
from tests.alerting.helpers import alert

MEMBERS = ["RewardModelOOM", "RolloutWorkerCrash", "RolloutBufferDrop"]


def correlator() -> Correlator:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.config_info["gpu-08"] = {"reward_batch_size": "64", "offload_reward_to_cpu": "false"}
    return c


def test_dataflow_collapse_forms_with_root_cause_and_live_config() -> None:
    c = correlator()
    assert c.observe(alert("RewardModelOOM", gpu_model="A100-80G"), 0) == ([], [])
    assert c.observe(alert("RolloutWorkerCrash"), 30) == ([], [])
    routed, incidents = c.observe(alert("RolloutBufferDrop"), 60)
    assert len(routed) == 1 and len(incidents) == 1
    inc = incidents[0]
    assert inc.alert.labels == {"alertname": "DataflowCollapse", "severity": "P0", "cluster": "llama3-1k-gpu",
                                "node": "gpu-08"}
    assert inc.alert.annotations["root_cause"] == "Reward Model OOM on node gpu-08 (A100-80G)"
    assert inc.alert.annotations["suggestion"] == \
        "Reduce reward_batch_size from 64 to 32, or add --offload_reward_to_cpu"
    assert len(inc.members) == 3 and not c.held
    assert c.expand(inc.alert)[0] == inc.alert.fingerprint and len(c.expand(inc.alert)) == 4


def test_suggestion_follows_live_config() -> None:
    c = correlator()
    c.config_info["gpu-08"] = {"reward_batch_size": "16", "offload_reward_to_cpu": "true"}
    for name in MEMBERS:
        _, incs = c.observe(alert(name), 0)
    assert incs[0].alert.annotations["suggestion"] == "Reduce reward_batch_size from 16 to 8"


def test_members_on_different_nodes_do_not_join_and_are_released_after_window() -> None:
    c = correlator()
    c.observe(alert("RewardModelOOM", node="gpu-01"), 0)
    c.observe(alert("RolloutWorkerCrash", node="gpu-02"), 1)
    assert c.observe(alert("RolloutBufferDrop", node="gpu-03"), 2) == ([], [])
    assert c.expire(119) == []
    assert [a.name for a in c.expire(120)] == ["RewardModelOOM"]
    assert sorted(a.name for a in c.expire(200)) == ["RolloutBufferDrop", "RolloutWorkerCrash"]
    assert not c.incidents


def test_non_members_pass_straight_through() -> None:
    c = correlator()
    routed, incs = c.observe(alert("GPUOverTemperature"), 0)
    assert [a.name for a in routed] == ["GPUOverTemperature"] and incs == [] and not c.held


def test_late_member_is_absorbed_and_incident_resolves_with_its_members() -> None:
    c = correlator()
    for name in MEMBERS:
        _, incs = c.observe(alert(name), 0)
    inc = incs[0]
    late = alert("RewardModelOOM", gpu="3")
    assert c.observe(late, 10) == ([], [])
    assert late.fingerprint in inc.members
    for name in MEMBERS[:-1]:
        assert c.observe(alert(name, status="resolved"), 20) == ([], [])
    c.observe(alert("RewardModelOOM", gpu="3", status="resolved"), 21)
    routed, incs = c.observe(alert("RolloutBufferDrop", status="resolved"), 30)
    assert routed[0].status == "resolved" and routed[0].ends_at == 30 and incs[0] is inc


def test_training_divergence_names_kl_coef_and_workers() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.config_info["trainer"] = {"kl_coef": "0.0", "rollout_worker_num": "4"}
    _, incs = c.observe(alert("KLDriftDetected", severity="P2"), 0)  # the config value alone is a cause
    assert incs and "kl_coef = 0.0 (verl_config_info" in incs[0].alert.annotations["root_cause"]
    backlog = alert("RolloutBacklog", severity="P2")
    backlog.value = 2400.0  # the alert's own measurement: buffer age in seconds
    _, incs = c.observe(backlog, 5)  # joins the open incident, which is diagnosed again
    ann = incs[0].alert.annotations
    assert incs[0].alert.labels["severity"] == "P1" and incs[0].revision == 1
    assert "Set kl_coef to 0.1-0.5 (now 0.0)" in ann["suggestion"]
    assert "Raise rollout_worker_num from 4 to 8" in ann["suggestion"]


def test_a_verl_runs_incident_suggests_verls_key_names() -> None:
    """The monitor marks a volcengine verl run's config labels (trainer=verl): the diagnosis then names
    the keys a verl user writes, not ours."""
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.config_info["trainer"] = {"trainer": "verl", "kl_coef": "0.0", "rollout_worker_num": "4"}
    _, incs = c.observe(alert("KLDriftDetected", severity="P2"), 0)
    ann = incs[0].alert.annotations
    assert "Set algorithm.kl_ctrl.kl_coef / actor_rollout_ref.actor.kl_loss_coef to 0.1-0.5" in ann["suggestion"]
    backlog = alert("RolloutBacklog", severity="P2")
    backlog.value = 2400.0
    _, incs = c.observe(backlog, 5)
    suggestion = incs[0].alert.annotations["suggestion"]
    assert "Raise actor_rollout_ref.rollout.agent.num_workers from 4 to 8" in suggestion
    assert "rollout_worker_num" not in suggestion and "Set kl_coef" not in suggestion


def test_data_loading_rule_uses_config_condition() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.config_info["n"] = {"data_num_workers": "0", "data_persistent_workers": "false", "data_pin_memory": "false"}
    _, incs = c.observe(alert("ThroughputDrop", severity="P2"), 0)
    assert incs and "data.num_workers: 8 (now 0)" in incs[0].alert.annotations["suggestion"]
    c2 = Correlator(load_rules([DEFAULT_RULES]))
    c2.config_info["n"] = {"data_num_workers": "8"}
    assert c2.observe(alert("ThroughputDrop", severity="P2"), 0) == ([], [])


def test_user_rules_extend_and_override(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("rules:\n  - name: HotNode\n    severity: P1\n    window: 30s\n"
                 "    all_of: [GPUOverTemperature, GPUXidError]\n    join: [node]\n"
                 "    root_cause: 'GPU {{ members.GPUXidError.labels.gpu }} overheating on {{ labels.node }}'\n")
    c = Correlator(load_rules([DEFAULT_RULES, f]))
    c.observe(alert("GPUOverTemperature"), 0)
    _, incs = c.observe(alert("GPUXidError", gpu="5"), 1)
    assert incs[0].alert.annotations["root_cause"] == "GPU 5 overheating on gpu-08"
    assert c.rules[-1].window_s == 30


def test_bad_rule_file_is_one_line_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("rules:\n  - name: X\n    severity: P9\n    all_of: [A]\n")
    with pytest.raises(AlertingConfigError, match=r"rules\[0\]\.severity"):
        load_rules([f])


def test_state_round_trip() -> None:
    c = correlator()
    c.observe(alert("RewardModelOOM"), 0)
    c.observe(alert("RolloutWorkerCrash"), 1)
    c2 = Correlator(load_rules([DEFAULT_RULES]))
    c2.load_state(c.to_state(), {**{a.fingerprint: a for a in (h.alert for h in c.held.values())}}.get)
    _, incs = c2.observe(alert("RolloutBufferDrop"), 2)
    assert incs and "from 64 to 32" in incs[0].alert.annotations["suggestion"]
