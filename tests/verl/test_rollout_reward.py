"""Rollout sampling is a function of (seed, step, prompt) only; reward sources behind one interface."""

from __future__ import annotations

import pytest
import torch

from verl.config import TrainerConfigError
from verl.config.schema import TinyModelConfig
from verl.data.loader import PromptItem
from verl.models.loading import load_causal_lm
from verl.models.reward import Scores, load_reward_model
from verl.models.tokenizer import ByteTokenizer
from verl.rollout import reconcile
from verl.rollout.hf import HFRolloutEngine
from verl.utils.clock import SimulatedClock


@pytest.fixture(scope="module")
def engine() -> HFRolloutEngine:
    model = load_causal_lm("tiny", TinyModelConfig(), n_positions=48, seed=0)
    return HFRolloutEngine(model, ByteTokenizer(), response_length=8, max_prompt_length=24, temperature=1.0,
                           seed=0, clock=SimulatedClock(100.0))


def test_sample_independent_of_batch_and_padding(engine: HFRolloutEngine) -> None:
    alone = engine.generate([PromptItem(1, "Q: hi A:")], step=3)[0]
    mixed = engine.generate([PromptItem(7, "Q: a much longer prompt than the other A:"),
                             PromptItem(1, "Q: hi A:")], step=3)[1]
    assert alone.response_ids == mixed.response_ids
    assert alone.created_at == 100.0 and alone.step == 3


def test_sample_changes_with_step_and_prompt(engine: HFRolloutEngine) -> None:
    base = engine.generate([PromptItem(1, "Q: hi A:"), PromptItem(2, "Q: hi A:")], step=3)
    later = engine.generate([PromptItem(1, "Q: hi A:")], step=4)[0]
    assert base[0].response_ids != base[1].response_ids   # same text, different prompt id
    assert base[0].response_ids != later.response_ids


def test_response_stops_at_eos(engine: HFRolloutEngine) -> None:
    for r in engine.generate([PromptItem(i, "Q: x A:") for i in range(8)], step=1):
        assert 1 <= len(r.response_ids) <= 8
        assert ByteTokenizer.eos_token_id not in r.response_ids[:-1]


def test_tiny_model_never_emits_what_validation_drops(engine: HFRolloutEngine) -> None:
    from verl.data.guards import RolloutValidator

    prompts = [PromptItem(i, f"Q: prompt {i} A:") for i in range(64)]
    out = engine.generate(prompts, step=1)
    assert not {t for r in out for t in r.response_ids} & set(ByteTokenizer.unprintable_ids)
    assert RolloutValidator().filter([r.response for r in out]) == list(range(64))
    logits = engine.model(torch.tensor([[65, 66]])).logits[0, -1]
    assert torch.isfinite(torch.log_softmax(logits, -1)).all()  # masked, not -inf: entropies stay finite


def test_reconcile_counts_lost_and_duplicated_rollouts(engine: HFRolloutEngine) -> None:
    prompts = [PromptItem(1, "a"), PromptItem(2, "b"), PromptItem(2, "b"), PromptItem(3, "c")]
    out = engine.generate(prompts, step=1)
    exact = reconcile(prompts, out)
    assert (exact.lost, exact.duplicated, exact.rollouts) == (0, 0, out)  # a prompt drawn twice comes back twice
    got = reconcile(prompts, [out[0], out[0], out[1], out[2], out[2]])
    assert [r.prompt_id for r in got.rollouts] == [1, 2, 2] and (got.lost, got.duplicated) == (1, 2)


def test_rule_reward_scores_the_response_and_formats_like_the_article() -> None:
    model = load_reward_model("rule:lowercase")
    scores = model.score(["Q: What is RL? A: abcD", "Q: x A: "])
    assert scores == [0.75, 0.0] and isinstance(scores, Scores)
    assert f"{model.score(['Q: x A: ab'])[0]:.3f}" == "1.000"
    assert f"{model.score(['Q: x A: ab']):.3f}" == "1.000"   # the article's one-sample print works as written


def test_function_reward(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_rewards.py").write_text("def length_reward(texts):\n    return [len(t) for t in texts]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = load_reward_model("my_rewards:length_reward")
    assert model.score(["ab", "abcd"]) == [2.0, 4.0]


@pytest.mark.parametrize(("path", "needle"), [
    ("rule:nope", "unknown rule"), ("no_such_module_xyz:f", "cannot import"), ("/no/such/dir", "fix the path"),
])
def test_bad_reward_paths(path: str, needle: str) -> None:
    with pytest.raises(TrainerConfigError, match=needle):
        load_reward_model(path)
