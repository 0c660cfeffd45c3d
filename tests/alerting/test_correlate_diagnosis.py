"""Correlation over an alert's whole firing life, and the diagnosis hook: members minutes apart still
form the incident, one alert with a measured cause is enough, evidence that arrives later still pages,
and a member routed alone keeps its updates routed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alerting.config import DEFAULT_RULES, AlertingConfigError
from alerting.correlate import REDIAGNOSE_S, Correlator, load_rules
from alerting.evidence import Evidence, SeriesWindow
from tests.alerting.helpers import T0, alert


def kl_coef_gauge(value: float, node: str = "gpu-08") -> Evidence:
    """What the monitor hands forward once it has scraped verl_kl_coef (one sample, at T0)."""
    window = SeriesWindow("verl_kl_coef", {"node": node}, np.array([T0]), np.array([value]))
    return Evidence(T0, (window,))


def test_members_six_minutes_apart_still_form_the_incident_and_resolution_is_routed() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    nonfinite = alert("NonFiniteGradients")
    assert c.observe(nonfinite, 0) == ([], [])
    released = c.expire(120)  # its 2-min hold ends: routed alone, but still a candidate
    assert [a.name for a in released] == ["NonFiniteGradients"]
    routed, incs = c.observe(alert("RewardDistributionDrift", severity="P2"), 360)
    assert [i.rule for i in incs] == ["TrainingDivergence"] and routed == [incs[0].alert]
    assert set(incs[0].members) == {nonfinite.fingerprint, alert("RewardDistributionDrift", severity="P2").fingerprint}
    # no evidence wired in: the diagnosis says what it could not measure instead of naming a cause
    assert incs[0].alert.annotations["root_cause"].startswith("Not determined from the evidence: reward mean "
                                                              "not measured")
    # the member routed alone gets its resolution routed too (its group must not stay firing)
    routed, _ = c.observe(alert("NonFiniteGradients", status="resolved"), 400)
    assert [a.status for a in routed] == ["resolved"] and routed[0].fingerprint == nonfinite.fingerprint


def test_one_alert_with_a_measured_cause_forms_the_incident_at_once() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.note_evidence(kl_coef_gauge(0.0))
    c.config_info["trainer"] = {"kl_coef": "0.2"}
    routed, incs = c.observe(alert("KLDriftDetected", severity="P2"), 0)
    assert [i.rule for i in incs] == ["TrainingDivergence"] and routed == [incs[0].alert] and not c.held
    ann = incs[0].alert.annotations
    assert ann["root_cause"].startswith("kl_coef = 0.0 since 14:23:17 UTC (verl_kl_coef; config says 0.2)")
    assert ann["diagnosis"] == "kl_coef" and "reward model" not in ann["root_cause"]


def test_evidence_arriving_after_the_alert_still_pages_by_rediagnosis() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.note_evidence(Evidence(T0))  # nothing measured yet
    assert c.observe(alert("KLDriftDetected", severity="P2"), 0) == ([], [])  # gauge not scraped yet
    assert c.rediagnose(1) == []
    assert c.rediagnose(2) == []  # no new evidence: at most every REDIAGNOSE_S
    assert c.rediagnose(1 + REDIAGNOSE_S) == []  # again, still nothing measured
    c.note_evidence(kl_coef_gauge(0.0))  # the next scrape brings verl_kl_coef, handed forward by the monitor
    incs = c.rediagnose(2 + REDIAGNOSE_S)  # diagnosed again as soon as it arrived
    assert [i.rule for i in incs] == ["TrainingDivergence"] and not c.live and not c.held


def test_live_value_in_range_claims_nothing_and_alert_goes_alone() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.note_evidence(kl_coef_gauge(0.2))
    c.config_info["trainer"] = {"kl_coef": "0.0"}  # a stale config label must not win over the live gauge
    assert c.observe(alert("KLDriftDetected", severity="P2"), 0) == ([], [])
    assert c.rediagnose(10) == [] and [a.name for a in c.expire(120)] == ["KLDriftDetected"]


def test_candidates_survive_a_restart() -> None:
    c = Correlator(load_rules([DEFAULT_RULES]))
    first = alert("NonFiniteGradients")
    c.observe(first, 0)
    c.expire(120)
    c2 = Correlator(load_rules([DEFAULT_RULES]))
    c2.load_state(c.to_state(), {first.fingerprint: first}.get)
    assert first.fingerprint in c2.live and first.fingerprint in c2.released
    _, incs = c2.observe(alert("KLDriftDetected", severity="P2"), 300)
    assert [i.rule for i in incs] == ["TrainingDivergence"]


def test_unknown_diagnosis_procedure_is_a_one_line_config_error(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text("rules:\n  - name: X\n    all_of: [A]\n    diagnose: [tea_leaves]\n")
    with pytest.raises(AlertingConfigError, match=r"rules\[0\]\.diagnose: unknown procedure 'tea_leaves'"):
        load_rules([f])


def test_a_late_member_the_sent_page_does_not_explain_pages_on_its_own() -> None:
    """MemoryGrowth was paged as a leak; a reward-model timeout joining it later must still reach a
    receiver (the incident's page is not sent again)."""
    c = Correlator(load_rules([DEFAULT_RULES]))
    c.config_info["trainer"] = {"rollout_buffer_max_size": "-1"}
    leak = alert("MemoryLeakSuspected")
    leak.value = 300e6
    _, incs = c.observe(leak, 0)  # unbounded buffer by config: a measured cause on its own
    assert [i.rule for i in incs] == ["MemoryGrowth"]
    timeout = alert("RewardModelTimeout", severity="P2")
    routed, _ = c.observe(timeout, 200)
    assert timeout.fingerprint in incs[0].members and timeout in routed
    another_gpu = alert("MemoryLeakSuspected", gpu="1")
    another_gpu.value = 300e6
    assert c.observe(another_gpu, 210)[0] == []  # explained by the page already sent: travels inside only


def test_the_trigger_table_is_what_each_procedure_runs_on() -> None:
    """TRIGGERS is derived from the procedures: each runs on each of its triggers alone and on no other."""
    from alerting.findings import Case
    from alerting.procedures import EXPLAINS, PROCEDURES, TRIGGER_ALERTS, TRIGGERS

    assert set(TRIGGERS) == set(PROCEDURES) == set(EXPLAINS)
    for name, proc in PROCEDURES.items():
        assert TRIGGERS[name] == proc.triggers <= EXPLAINS[name]
        for trigger in proc.triggers:
            assert proc.run(Case([alert(trigger)], {}, Evidence(T0))) is not None, (name, trigger)
        others = [alert(n) for n in sorted(TRIGGER_ALERTS - proc.triggers)]
        assert proc.run(Case(others, {}, Evidence(T0))) is None, name
