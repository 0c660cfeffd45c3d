"""Issue 32's pages for the failure families that kill verl runs, on per-step series of a verl log
(``job="verl_jsonl"``), judged in steps: the same rule at 20-s and 1-h steps."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_scenarios import T0, firing, run

from monitor.detectors.threshold import FluctuationDetector
from monitor.sources.verl_keys import derived, map_key

NODE = {"node": "gpu-08", "job": "verl_jsonl"}


def _steps(step_s: float, n: int) -> np.ndarray:
    return T0 + step_s * np.arange(1, n + 1)


def _step_of(t: np.ndarray, record: dict) -> int:
    from datetime import datetime

    fired = datetime.fromisoformat(record["startsAt"].replace("Z", "+00:00")).timestamp()
    return int(np.searchsorted(t, fired, side="right"))


def _resolved(records: list[dict], alertname: str) -> list[dict]:
    return [r for r in records if r["kind"] == "alert" and r["status"] == "resolved"
            and r["labels"]["alertname"] == alertname]


@pytest.mark.parametrize("step_s", [20.0, 3600.0])
def test_entropy_collapse_pages_within_fifteen_steps_at_any_step_time(step_s: float) -> None:
    rng = np.random.default_rng(1)
    n, onset = 200, 120
    t = _steps(step_s, n)
    k = np.arange(1, n + 1)
    healthy = 0.7 - 0.2 * k / n  # the slow decline of a learning policy: never a page
    entropy = healthy * 10.0 ** -np.clip((k - onset + 1) / 20.0, 0, 1) + rng.normal(0, 0.01, n)
    records = run([("verl_entropy", NODE, t, np.maximum(entropy, 0.005))])
    hits = firing(records, "PolicyEntropyShift")
    assert hits and onset <= _step_of(t, hits[0]) <= onset + 15, [(_step_of(t, h)) for h in hits]
    assert "collapsed" in hits[0]["annotations"]["summary"]
    assert "actor_rollout_ref.actor.entropy_coeff" in hits[0]["annotations"]["runbook"]
    assert len(hits) == 1


def test_healthy_entropy_decline_pages_nothing() -> None:
    rng = np.random.default_rng(2)
    n = 300
    t = _steps(60.0, n)
    entropy = 0.8 * np.exp(-np.arange(n) / 400.0) + rng.normal(0, 0.015, n)  # -50 % over the run
    assert not firing(run([("verl_entropy", NODE, t, entropy)]), "PolicyEntropyShift")


def test_kl_blow_up_is_one_page_held_while_kl_accelerates_at_90s_steps() -> None:
    rng = np.random.default_rng(3)
    n, onset = 220, 40  # inside verl's KL warm-up: the trend rule alone paged 58 steps late
    t = _steps(90.0, n)
    k = np.arange(1, n + 1)
    kl = 0.03 * (1 - np.exp(-k / 20.0)) + rng.normal(0, 0.0015, n)  # verl's warm-up from 0
    after = np.clip(k - onset, 0, None)
    kl = kl + 0.0008 * after + 0.00012 * after**2
    records = run([("verl_kl_divergence", {**NODE, "source": "kl_loss"}, t, kl)])
    hits = firing(records, "KLDriftDetected")
    assert len(hits) == 1 and onset <= _step_of(t, hits[0]) <= onset + 20, [_step_of(t, h) for h in hits]
    ends = [r for r in _resolved(records, "KLDriftDetected")
            if r["endsAt"] and r["endsAt"] < "9999" and _step_of(t, {"startsAt": r["endsAt"]}) < n]
    assert not ends, ends


def _length_columns(n: int, clip: np.ndarray, longest: np.ndarray, step_s: float = 60.0) -> list:
    t = _steps(step_s, n)
    return [("verl_jsonl_response_length_clip_ratio", NODE, t, clip),
            ("verl_jsonl_response_length_max", NODE, t, longest)]


def test_verl_v1_clip_ratio_bug_is_named_not_paged_as_the_cap() -> None:
    rng = np.random.default_rng(4)
    n = 120
    # V1 compares lengths with the batch's longest response: 1 of a 4-sample batch always "at the cap"
    records = run(_length_columns(n, np.full(n, 0.25), rng.integers(300, 480, n).astype(float)))
    assert not firing(records, "ResponseLengthAtCap")
    sane = firing(records, "ResponseClipRatioUnreliable")
    assert sane and sane[0]["labels"]["severity"] == "P3" and "7817" in sane[0]["annotations"]["runbook"]


def test_responses_at_the_cap_page_with_the_cap_quoted() -> None:
    n = 120
    clip = np.where(np.arange(n) < 60, 0.01, 0.6)
    records = run(_length_columns(n, clip, np.full(n, 512.0)))
    hits = firing(records, "ResponseLengthAtCap")
    assert hits and "pinned at 512 tokens" in hits[0]["annotations"]["summary"], hits[:1]
    assert "data.max_response_length" in hits[0]["annotations"]["runbook"]
    assert not firing(records, "ResponseClipRatioUnreliable")


def _validation(t: np.ndarray, score: np.ndarray, metric: str, vi: np.ndarray, val: np.ndarray) -> list:
    """The series a verl log's source makes of them: the score every step, and on validation steps the
    validation mean and the gap (verl_keys.derived)."""
    return [("verl_reward_mean", NODE, t, score),
            ("verl_validation_metric", {**NODE, "metric": metric}, t[vi], val[vi]),
            ("verl_train_validation_gap", {**NODE, "metric": metric}, t[vi], score[vi] - val[vi])]


def test_reward_hacking_names_the_validation_and_the_training_series() -> None:
    rng = np.random.default_rng(5)
    n, onset, test_freq = 200, 110, 5
    t = _steps(60.0, n)
    k = np.arange(1, n + 1)
    ramp = np.clip((k - onset) / 40.0, 0, 1)
    score = 0.5 + 0.25 * np.minimum(k / 100.0, 1) + (0.94 - 0.75) * ramp + rng.normal(0, 0.03, n)
    val = 0.62 - 0.5 * ramp + rng.normal(0, 0.01, n)
    vi = np.arange(test_freq - 1, n, test_freq)
    metric = "val-core/openai/gsm8k/acc/mean@1"
    records = run(_validation(t, score, metric, vi, val))
    hits = firing(records, "RewardHackingSuspected")
    assert hits and _step_of(t, hits[0]) <= onset + 3 * test_freq + 10, hits[:1]
    summary = hits[0]["annotations"]["summary"]
    assert f"critic/score/mean pulling away from validation {metric}" in summary, summary
    assert f"while validation {metric} fell" in summary, summary


def test_a_validation_fall_with_the_training_score_falling_too_is_not_hacking() -> None:
    rng = np.random.default_rng(6)
    n, onset = 200, 110
    t = _steps(60.0, n)
    k = np.arange(1, n + 1)
    ramp = np.clip((k - onset) / 40.0, 0, 1)
    score = 0.75 - 0.5 * ramp + rng.normal(0, 0.03, n)  # a reward collapse: both fall
    val = 0.62 - 0.5 * ramp + rng.normal(0, 0.01, n)
    vi = np.arange(4, n, 5)
    records = run(_validation(t, score, "val-core/x/reward/mean@1", vi, val))
    assert not firing(records, "RewardHackingSuspected")


def test_finite_grad_norm_burst_and_critic_divergence_page() -> None:
    rng = np.random.default_rng(7)
    n, onset = 200, 120
    t = _steps(60.0, n)
    k = np.arange(1, n + 1)
    grad = np.exp(rng.normal(np.log(0.6), 0.15, n))
    grad[onset - 1:onset + 2] *= 50.0
    vf = np.abs(rng.normal(0.1, 0.02, n)) * np.where(k >= onset + 3, 75.0, 1.0)
    records = run([("verl_grad_norm", {**NODE, "model": "actor"}, t, grad), ("verl_critic_loss", NODE, t, vf)])
    burst, div = firing(records, "GradientNormBurst"), firing(records, "LossDivergence")
    assert burst and _step_of(t, burst[0]) == onset and "x" in burst[0]["annotations"]["summary"]
    assert div and _step_of(t, div[0]) <= onset + 3 + 6 and div[0]["labels"]["signal"] == "critic_loss"


def test_fluctuation_below_is_true_while_the_series_stays_flat() -> None:
    det = FluctuationDetector(window=5.0, min_relative=0.005, min_samples=4, below=True)
    assert [det.update(float(i), 512.0).active for i in range(5)] == [False, False, False, True, True]
    assert not det.update(5.0, 400.0).active


def test_validation_keys_are_one_series_each() -> None:
    m = map_key("val-core/openai/gsm8k/reward/mean@4")
    assert m is not None and (m.name, m.labels) == ("verl_validation_metric", {"metric": "val-core/openai/gsm8k/reward/mean@4"})
    assert map_key("val-aux/num_turns/mean").labels == {"metric": "val-aux/num_turns/mean"}


def test_the_source_derives_the_train_validation_gap_on_validation_records() -> None:
    record = {"critic/score/mean": 0.9, "val-core/gsm8k/acc/mean@4": 0.2, "val-aux/gsm8k/acc/std@4": 0.3,
              "val-aux/num_turns/mean": 2.0, "val-core/gsm8k/acc/best@4/mean": 0.5}
    gaps = {map_key(k).labels["metric"]: round(v, 6) for k, v in derived(record).items()}
    assert gaps == {"val-core/gsm8k/acc/mean@4": 0.7, "val-core/gsm8k/acc/best@4/mean": 0.4}
    assert {map_key(k).name for k in derived(record)} == {"verl_train_validation_gap"}
    assert derived({"critic/score/mean": 0.9}) == {}


def test_our_trainers_scraped_entropy_collapse_pages_in_minutes() -> None:
    rng = np.random.default_rng(8)
    t = T0 + np.arange(0.0, 3 * 3600.0, 15.0)  # our trainer's gauge, scraped every 15 s
    entropy = np.where(t - T0 < 2 * 3600.0, 0.6, 0.06) + rng.normal(0, 0.01, len(t))
    hits = firing(run([("verl_entropy", {"node": "gpu-08"}, t, entropy)]), "PolicyEntropyShift")
    assert hits and "collapsed" in hits[0]["annotations"]["summary"]
