"""Data guards: prompt clusters with cooldown and dedup, reward guard, rollout validation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter

from verl.data.guards import GuardConfigError, PromptClusters, RolloutValidator
from verl.data.reward_guard import RewardGuard
from verl.utils.clock import SimulatedClock

CATS = ["Tell me a story about a cat named Tom.", "Tell me a story about a cat named Tim."]
OTHER = "Compute the integral of x squared from zero to three."


def test_similar_prompts_share_a_cluster_and_cool_down() -> None:
    clock = SimulatedClock(0.0)
    clusters = PromptClusters(cooldown_minutes=30, clock=clock)
    assert clusters.cluster_of(CATS[0]) == clusters.cluster_of(CATS[1]) != clusters.cluster_of(OTHER)
    assert clusters.admit(CATS[0]).admitted
    refused = clusters.admit(CATS[1])
    assert not refused.admitted and refused.reason == "cooldown"
    assert clusters.admit(OTHER).admitted  # another cluster is not affected
    clock.advance(29 * 60)
    assert not clusters.admit(CATS[0]).admitted
    assert clusters.cooled_for(CATS[1]) == 29 * 60
    clock.advance(60)
    assert clusters.admit(CATS[1]).admitted

    restored = PromptClusters(cooldown_minutes=30, clock=clock)
    restored.load_state_dict(json.loads(json.dumps(clusters.state_dict())))
    assert restored.cluster_of(OTHER) == clusters.cluster_of(OTHER)
    assert not restored.admit(CATS[0]).admitted  # its cooldown came back with the state
    assert restored.admit(OTHER).admitted  # used 30 min ago: cooled down


def test_dedup_drops_exact_and_near_duplicates_only() -> None:
    texts = [
        "Explain step by step how photosynthesis turns light into chemical energy in green plants.",
        "explain step by step how photosynthesis turns light into chemical energy in   green plants.",  # same
        "Explain step by step how photosynthesis turns light into chemical energy in green plants!",  # near
        "Explain step by step how a steam engine turns heat into mechanical work in old trains.",
        OTHER,
    ]
    assert PromptClusters().dedup(texts) == [0, 3, 4]
    assert PromptClusters(dedup=False).dedup(texts) == [0, 1, 2, 3, 4]


def paused_counter() -> Counter:
    return Counter("verl_batches_paused", "", ["reason"], registry=CollectorRegistry())


def normal_batch(k: int, n: int = 40) -> list[float]:
    return [0.5 + 0.1 * (((i * 7 + k) % 11) - 5) / 5 for i in range(n)]


def test_variance_jump_pauses_update() -> None:
    counter = paused_counter()
    guard = RewardGuard(paused_counter=counter)
    for k in range(5):
        assert not guard.check(normal_batch(k)).skip
    jumpy = [0.5 + 0.4 * (-1) ** i for i in range(40)]  # same mean, variance ×16
    verdict = guard.check(jumpy, [f"p{i}" for i in range(40)], step=6)
    assert verdict.skip and verdict.reason == "variance_jump" and verdict.variance > 3 * verdict.baseline_variance
    assert counter.labels(reason="variance_jump")._value.get() == 1
    assert not guard.check(normal_batch(9)).skip  # a spike does not poison the baseline


def test_extreme_values_pause_and_report_outliers() -> None:
    counter = paused_counter()
    guard = RewardGuard(paused_counter=counter)
    for k in range(4):
        guard.check(normal_batch(k))
    rewards = normal_batch(1)
    rewards[3], rewards[17], rewards[30] = 9.0, -8.0, float("nan")  # 3/40 = 7.5 % > 5 %
    prompts = [f"prompt {i}" for i in range(40)]
    verdict = guard.check(rewards, prompts, step=42)
    assert verdict.skip and verdict.reason == "extreme_values" and verdict.extreme_ratio == pytest.approx(0.075)
    top = guard.outliers(3)
    assert [o["prompt"] for o in top] == ["prompt 30", "prompt 3", "prompt 17"] and top[0]["z"] == "inf"
    assert all(o["step"] == 42 for o in top)
    one = normal_batch(2)
    one[0] = 9.0  # 1/40 = 2.5 % is tolerated
    assert not guard.check(one).skip
    assert counter.labels(reason="extreme_values")._value.get() == 1

    clone = RewardGuard()
    clone.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    assert clone.outliers(3) == guard.outliers(3) and clone.state_dict() == guard.state_dict()


def test_sustained_shift_rebaselines_instead_of_stalling() -> None:
    guard = RewardGuard(max_consecutive_pauses=3)
    for k in range(4):
        guard.check(normal_batch(k))
    wide = [0.5 + 0.5 * (-1) ** i for i in range(40)]
    assert [guard.check(wide).skip for _ in range(5)] == [True, True, True, False, False]
    assert guard.paused == {"variance_jump": 3}
    nan = [float("nan")] * 40
    assert all(guard.check(nan).reason == "extreme_values" for _ in range(5))  # never accepted


def test_rollout_validator_reasons_and_counts(tmp_path: Path) -> None:
    counter = Counter("verl_rollout_samples_dropped", "", ["reason"], registry=CollectorRegistry())
    schema = tmp_path / "answer.json"
    schema.write_text(json.dumps({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "number"}}}))
    v = RolloutValidator(max_response_tokens=512, response_schema=schema, dropped_counter=counter)
    responses = ['{"answer": 4}', '{"answer": "four"}', "not json", '{"answer": 4}\x00', "x" * 513, '{"answer": 1}\ud800']
    assert v.filter(responses) == [0]
    assert v.dropped == {"schema_violation": 1, "invalid_json": 1, "illegal_chars": 2, "too_long": 1}
    assert counter.labels(reason="illegal_chars")._value.get() == 2
    assert v.filter(['{"answer": 1}'], num_tokens=[600]) == []  # the trainer's token count wins
    plain = RolloutValidator()
    assert plain.filter(["line one\nline two\ttabbed", "a" * 512, "a" * 513, "bell\x07"]) == [0, 1]
    assert plain.check("é" * 257) == "too_long"  # 514 UTF-8 bytes


def test_bad_schema_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(GuardConfigError, match=r"data.response_schema: cannot read .*missing.json"):
        RolloutValidator(response_schema=tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": 12}')
    with pytest.raises(GuardConfigError, match="is not a valid JSON Schema") as info:
        RolloutValidator(response_schema=bad)
    assert "\n" not in str(info.value)


def test_one_or_two_extreme_samples_in_a_small_batch_are_not_a_share() -> None:
    """A saturated policy's own one or two misses in 16 answers look exactly like this; three are a share."""
    guard = RewardGuard()
    rng = np.random.default_rng(1)
    for _ in range(5):
        assert not guard.check(list(rng.normal(0.9, 0.02, 16))).skip
    one = list(rng.normal(0.9, 0.02, 16))
    one[4] = 0.2  # z ≫ 4, but 1/16 is one exploring sample, not "6.25 % extreme values"
    assert not guard.check(one).skip
    two = list(rng.normal(0.9, 0.02, 16))
    two[4] = two[9] = 0.2
    assert not copy.deepcopy(guard).check(two).skip  # (an accepted batch joins the reference: judge a copy)
    three = list(rng.normal(0.9, 0.02, 16))
    three[4] = three[9] = three[11] = 0.2
    verdict = guard.check(three)
    assert verdict.skip and verdict.reason == "extreme_values"


def test_a_single_nan_in_a_large_batch_still_pauses() -> None:
    guard = RewardGuard()
    rewards = [0.5] * 99 + [float("nan")]  # 1 % < 5 %: a NaN is never trained on regardless
    assert guard.check(rewards).skip
