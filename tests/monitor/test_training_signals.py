"""The training-signal catalogue (monitor/rules/signals.yaml): every verl key judged against the run itself,
in steps of the run's log; its healthy look-alikes stay quiet; a key nobody catalogued is still watched (P3)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from monitor_scenarios import T0, firing, run

from alerting import catalogue
from monitor.detectors.run_reference import RunReferenceDetector
from monitor.evaluation import signals
from monitor.evaluation.rules import DEFAULT_RULES, load_rule_files
from monitor.sources.verl_keys import map_key

NODE = {"node": "gpu-08", "job": "verl_jsonl"}
PAGES = ("P0", "P1", "P2")


def _t(step_s: float, n: int) -> np.ndarray:
    return T0 + step_s * np.arange(1, n + 1)


def _col(key: str, t: np.ndarray, v: np.ndarray) -> tuple:
    m = map_key(key)
    assert m is not None
    return (m.name, {**NODE, **m.labels}, t, v)


def _step_of(t: np.ndarray, record: dict) -> int:
    from datetime import datetime

    fired = datetime.fromisoformat(record["startsAt"].replace("Z", "+00:00")).timestamp()
    return int(np.searchsorted(t, fired, side="right"))


def _pages(records: list[dict]) -> list[str]:
    return sorted({r["labels"]["alertname"] for r in records if r["kind"] == "alert" and r["status"] == "firing"
                   and r["labels"]["severity"] in PAGES})


# ---- the catalogue ------------------------------------------------------------------------------------

def test_every_entry_raises_a_catalogued_alert_of_its_own_severity() -> None:
    alerts = {a.name: a.severity for a in catalogue.load()}
    for s in signals.load().signals:
        assert alerts.get(s.alert) == s.severity, f"{s.key}: {s.alert} {s.severity} vs alerting/catalogue.yaml"


def test_watched_by_names_a_default_rule_on_the_keys_series() -> None:
    rules = yaml.safe_load(DEFAULT_RULES.read_text())["rules"]
    for s in signals.load().signals:
        for alert in s.watched_by:
            sels = [r["select"] if isinstance(r["select"], list) else [r["select"]] for r in rules if r["alert"] == alert]
            assert any(x.startswith(s.series) for sel in sels for x in sel), f"{s.key}: no {alert} rule reads {s.series}"


def test_a_judge_on_the_healthy_trend_must_ask_for_a_factor(tmp_path) -> None:
    doc = yaml.safe_load(signals.PATH.read_text())
    entropy = next(e for e in doc["signals"] if e["key"] == "actor/entropy")
    entropy["judge"]["ratio"] = 2
    path = tmp_path / "signals.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(signals.SignalCatalogueError, match=r"actor/entropy.*ratio >= 4"):
        signals.load(path)


def test_a_new_key_costs_one_entry(tmp_path) -> None:
    doc = yaml.safe_load(signals.PATH.read_text())
    doc["signals"].append({"key": "rollout/new_health_score", "bad": ["down"], "trend": "none", "severity": "P2",
                           "alert": "RolloutResponsesAborted", "judge": {"ratio": 3}, "config": ["x.y"]})
    path = tmp_path / "signals.yaml"
    path.write_text(yaml.safe_dump(doc))
    rules = signals.load(path).rule_dicts()
    (new,) = [r for r in rules if r["select"].startswith("verl_jsonl_rollout_new_health_score{")]
    assert new["severity"] == "P2" and new["detector"]["direction"] == "down" and "x.y" in new["runbook"]
    generic = rules[-1]["select"]
    assert "verl_jsonl_rollout_new_health_score" in generic  # no longer one of the uncatalogued


def test_default_rules_carry_the_generated_rules() -> None:
    names = {r.alert for r in load_rule_files(None)}
    assert {"LearningSignalLost", "TrainInferenceMismatch", "UncataloguedSignalShift"} <= names


# ---- the detector ---------------------------------------------------------------------------------------

def test_slow_collapse_is_caught_against_the_run_not_the_last_window() -> None:
    """Entropy /5 over 60 steps never halves against any 30-step window, but is /5 against the run."""
    det = RunReferenceDetector(direction="down", ratio=4)
    k = np.arange(200)
    v = np.where(k < 80, 0.6, 0.6 * 5.0 ** -np.clip((k - 80) / 60, 0, 1))
    fired = [i for i, x in enumerate(v) if det.update(float(i), float(x)).active]
    assert fired and 80 < fired[0] <= 140 and fired[-1] == 199  # held while it lasts


def test_held_while_the_fault_lasts_after_the_sliding_reference_has_caught_up() -> None:
    det = RunReferenceDetector(direction="down", ratio=4, lookback=30)
    v = [1.0] * 40 + [0.1] * 200
    active = [det.update(float(i), x).active for i, x in enumerate(v)]
    assert all(active[50:])


def test_a_held_fault_near_its_min_delta_stays_held() -> None:
    """Aborted responses at ~x3 the floor and ~0.1 above it: a noisy median dipping under min_delta must not
    resolve the page and page again (it is held at half of min_delta)."""
    det = RunReferenceDetector(direction="up", ratio=3, min_delta=0.1, scale_floor=0.02)
    v = [0.005] * 30 + [0.3] * 10 + [0.08] * 20
    active = [det.update(float(i), x).active for i, x in enumerate(v)]
    assert active[38] and all(active[38:])


def test_pearson_correlation_is_judged_by_its_distance_from_one() -> None:
    det = RunReferenceDetector(direction="up", ratio=4, transform="one_minus", min_delta=0.05, scale_floor=0.002)
    rng = np.random.default_rng(0)
    v = np.r_[0.998 + rng.normal(0, 0.0005, 60), np.full(20, 0.67)]
    findings = [det.update(float(i), float(x)) for i, x in enumerate(v)]
    assert not any(f.active for f in findings[:60]) and findings[-1].active
    assert findings[-1].details["after"] == pytest.approx(0.67)


# ---- the families, through the default rules --------------------------------------------------------------

def test_zero_learning_signal_pages() -> None:
    """GRPO with every group's rewards equal: advantages 0, pg_loss 0, grad norm /40."""
    rng = np.random.default_rng(4)
    n, onset = 160, 90
    t = _t(60.0, n)
    k = np.arange(n)
    dead = k >= onset
    adv_max = np.where(dead, 0.0, 1.5 + rng.normal(0, 0.1, n))
    adv_min = np.where(dead, 0.0, -1.5 + rng.normal(0, 0.1, n))
    pg = np.where(dead, 0.0, rng.normal(0, 0.05, n))
    grad = np.where(dead, 0.6 / 40, 0.6 + rng.normal(0, 0.05, n))
    records = run([_col("critic/advantages/max", t, adv_max), _col("critic/advantages/min", t, adv_min),
                   _col("actor/pg_loss", t, pg), _col("actor/grad_norm", t, grad)])
    hits = firing(records, "LearningSignalLost")
    assert hits and onset < _step_of(t, hits[0]) <= onset + 6
    assert "actor_rollout_ref.rollout.n" in hits[0]["annotations"]["runbook"]


def test_response_length_collapse_pages_within_fifteen_steps() -> None:
    rng = np.random.default_rng(5)
    n, onset = 150, 100
    t = _t(30.0, n)
    k = np.arange(n)
    length = np.where(k < onset, 225.0, 225.0 * (5 / 225) ** np.clip((k - onset) / 15, 0, 1)) + rng.normal(0, 5, n)
    hits = firing(run([_col("response_length/mean", t, np.maximum(length, 1.0))]), "ResponseLengthCollapse")
    assert hits and onset < _step_of(t, hits[0]) <= onset + 15


def test_a_held_collapse_stays_one_page_across_validation_steps() -> None:
    """Collapsed responses make steps short (150 s) while every 20th step validates and saves (723 s,
    ~5 of them): the finding must stay fresh across those steps, not resolve and page again at each."""
    rng = np.random.default_rng(8)
    n, onset = 190, 90
    k = np.arange(n)
    step_s = np.where((k + 1) % 20 == 0, 723.0, 150.0)
    t = T0 + np.cumsum(step_s)
    length = np.where(k < onset, 62.0, 62.0 * (2.6 / 62.0) ** np.clip((k - onset) / 60, 0, 1)) + rng.normal(0, 1, n)
    polls = np.arange(T0, t[-1], 60.0)  # the live tail polls between records: the evaluation ticks there
    records = run([_col("response_length/mean", t, np.maximum(length, 1.0)),
                   ("replay_poll", {"node": "gpu-08"}, polls, np.zeros(polls.size))])
    events = [r["status"] for r in records if r["kind"] == "alert"
              and r["labels"]["alertname"] == "ResponseLengthCollapse"]
    assert events[:1] == ["firing"] and events.count("firing") == 1, events


def test_entropy_slow_collapse_at_eight_minute_steps_pages() -> None:
    rng = np.random.default_rng(6)
    n, onset = 200, 80
    t = _t(480.0, n)
    k = np.arange(n)
    entropy = 0.6 * 5.0 ** -np.clip((k - onset) / 60, 0, 1) + rng.normal(0, 0.01, n)
    hits = firing(run([("verl_entropy", NODE, t, entropy)]), "PolicyEntropyShift")
    assert hits and onset < _step_of(t, hits[0]) <= onset + 60


@pytest.mark.parametrize(("key", "before", "after"), [
    ("training/rollout_probs_diff_mean", 0.009, 0.17),
    ("rollout_corr/kl", 0.0005, 0.06),
    ("training/rollout_actor_probs_pearson_corr", 0.998, 0.67),
])
def test_train_inference_mismatch_pages_as_a_step_change(key: str, before: float, after: float) -> None:
    rng = np.random.default_rng(7)
    n, onset = 140, 70
    t = _t(120.0, n)
    k = np.arange(n)
    noise = rng.normal(0, abs(before) * 0.05 if key != "training/rollout_actor_probs_pearson_corr" else 0.0005, n)
    v = np.where(k < onset, before, after) + noise
    hits = firing(run([_col(key, t, v)]), "TrainInferenceMismatch")
    assert hits and onset < _step_of(t, hits[0]) <= onset + 5, key


def test_staleness_aborts_and_gen_batches_page() -> None:
    n, onset = 100, 60
    t = _t(60.0, n)
    k = np.arange(n)
    records = run([_col("training/off_policy/trajectory_staleness/mean", t, np.where(k < onset, 1.0, 6.0)),
                   _col("response/aborted_ratio", t, np.where(k < onset, 0.01, 0.3)),
                   _col("train/num_gen_batches", t, np.where(k < onset, 1.0, 8.0))])
    assert {"OffPolicyStalenessHigh", "RolloutResponsesAborted", "ZeroVarianceGroups"} <= set(_pages(records))


# ---- healthy look-alikes stay quiet -----------------------------------------------------------------------

def test_healthy_look_alikes_page_nothing() -> None:
    rng = np.random.default_rng(8)
    n = 400
    t = _t(600.0, n)  # 10-min steps
    k = np.arange(n)
    columns = [
        ("verl_entropy", NODE, t, 0.25 + 0.65 * np.exp(-k / 120) + rng.normal(0, 0.01, n)),  # 0.9 -> 0.25
        _col("response_length/mean", t, 600 + 2400 * k / n + rng.normal(0, 60, n)),  # R1-style growth
        _col("critic/score/mean", t, np.clip(0.3 + 0.4 * k / n + rng.normal(0, 0.15, n), 0, 1)),  # noisy, small batch
        _col("actor/grad_norm", t, 0.5 * (1 + 24 * np.exp(-k / 8)) + rng.normal(0, 0.03, n)),  # lr warm-up, 25x
        _col("actor/kl_loss", t, 0.001 + 0.05 * k / n + rng.normal(0, 0.0005, n)),  # slow KL growth, KL loss on
        _col("critic/advantages/max", t, 1.5 + rng.normal(0, 0.2, n)),
        _col("training/rollout_probs_diff_mean", t, 0.009 + rng.normal(0, 0.0015, n)),
        _col("training/rollout_actor_probs_pearson_corr", t, 0.998 + rng.normal(0, 0.0007, n)),
        _col("rollout_corr/kl", t, np.abs(0.0008 + rng.normal(0, 0.0004, n))),
        _col("response/aborted_ratio", t, np.abs(rng.normal(0, 0.01, n))),
    ]
    assert _pages(run(columns)) == []


def test_uncatalogued_key_gets_a_p3_change_watcher_and_never_a_page() -> None:
    n = 120
    t = _t(60.0, n)
    k = np.arange(n)
    records = run([("verl_jsonl_brand_new_verl_key", NODE, t, np.where(k < 70, 1.0, 10.0)),
                   ("verl_jsonl_another_new_key", NODE, t, np.full(n, 2.0))])
    hits = firing(records, "UncataloguedSignalShift")
    assert [h["labels"]["signal"] for h in hits] == ["verl_jsonl_brand_new_verl_key"]
    assert hits[0]["labels"]["severity"] == "P3" and not _pages(records)
