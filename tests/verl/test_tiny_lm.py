"""The tiny model (``verl.models.tiny_lm``, no transformers) is transformers' GPT-2 bit for bit: the same
parameters under the same seed, the same logits, hidden states and gradients for the trainer's forwards,
the same tokens from ``generate`` (left padding, EOS mid-batch, temperature, ``synced_gpus``); and the tiny
path never imports transformers. Every tuned trajectory of the suite and the demo rests on this."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from verl.config.schema import TinyModelConfig
from verl.models.loading import ValueModel, _printable_only, load_causal_lm, load_critic
from verl.models.tiny_lm import TinyCausalLM, TinyLMConfig, TinyTransformer
from verl.models.tokenizer import ByteTokenizer
from verl.rollout.hf import GumbelSampling
from verl.utils.seeding import derive_seed

if TYPE_CHECKING:
    from transformers import GPT2Config

ROOT = Path(__file__).resolve().parents[2]
TOK = ByteTokenizer()
SHAPES = [(0, TinyModelConfig()), (3, TinyModelConfig(n_layer=3, n_embd=32, n_head=4)),
          (11, TinyModelConfig(n_layer=1, n_embd=16, n_head=2))]


def gpt2() -> Any:
    """transformers, where a test compares with it (0.9 s to import): not in every worker that only collects
    this file."""
    import transformers

    return transformers


def hf_generate() -> Any:
    """verl's generation through transformers (``verl.models.hf_loading``, which imports it)."""
    from verl.models import hf_loading

    return hf_loading.generate


def configs(shape: TinyModelConfig, n_positions: int = 64) -> tuple[GPT2Config, TinyLMConfig]:
    ids = {"bos_token_id": TOK.bos_token_id, "eos_token_id": TOK.eos_token_id, "pad_token_id": TOK.pad_token_id}
    dims = {"vocab_size": TOK.vocab_size, "n_positions": n_positions, "n_embd": shape.n_embd,
            "n_layer": shape.n_layer, "n_head": shape.n_head}
    return (gpt2().GPT2Config(**dims, **ids, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
            TinyLMConfig(**dims, **ids))


def pair(seed: int, shape: TinyModelConfig) -> tuple[nn.Module, TinyCausalLM]:
    hf_cfg, cfg = configs(shape)
    torch.manual_seed(seed)
    hf = gpt2().GPT2LMHeadModel(hf_cfg)
    torch.manual_seed(seed)
    return hf, TinyCausalLM(cfg)


def left_padded(seed: int, lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), width), TOK.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(32, 127, (n,), generator=g)
        mask[i, width - n:] = 1
    return ids, mask


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]


@pytest.mark.parametrize(("seed", "shape"), SHAPES)
def test_same_parameters_keys_and_rng_state_under_the_same_seed(seed: int, shape: TinyModelConfig) -> None:
    hf_cfg, cfg = configs(shape)
    torch.manual_seed(seed)
    hf = gpt2().GPT2LMHeadModel(hf_cfg)
    hf_rng = torch.get_rng_state()
    torch.manual_seed(seed)
    tiny = TinyCausalLM(cfg)
    assert torch.equal(torch.get_rng_state(), hf_rng)  # every draw made, in the same order
    assert_same_state(hf, tiny)
    assert tiny.lm_head.weight is tiny.transformer.wte.weight  # tied as transformers ties it
    assert {n for n, _ in hf.named_parameters()} == {n for n, _ in tiny.named_parameters()}
    torch.manual_seed(seed)
    hf_backbone = gpt2().GPT2Model(hf_cfg)
    torch.manual_seed(seed)
    assert_same_state(hf_backbone, TinyTransformer(cfg))


def test_loaders_build_what_transformers_built() -> None:
    shape, n_positions, seed = TinyModelConfig(), 48, 5
    hf_cfg, _ = configs(shape, n_positions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "actor-init"))
        hf_actor = gpt2().GPT2LMHeadModel(hf_cfg)
        torch.manual_seed(derive_seed(seed, "critic-init"))
        hf_critic = ValueModel(gpt2().GPT2Model(hf_cfg), shape.n_embd)
    nn.init.zeros_(hf_critic.value_head.weight)
    nn.init.zeros_(hf_critic.value_head.bias)
    assert_same_state(hf_actor, load_causal_lm("tiny", shape, n_positions, seed))
    assert_same_state(hf_critic, load_critic("tiny", shape, n_positions, seed))


@pytest.mark.parametrize(("seed", "shape", "checkpointing"), [(*s, False) for s in SHAPES] + [(*SHAPES[1], True)])
def test_same_logits_hidden_states_and_gradients(seed: int, shape: TinyModelConfig, checkpointing: bool) -> None:
    hf, tiny = pair(seed, shape)
    hf, tiny = _printable_only(hf), _printable_only(tiny)
    if checkpointing:
        hf.activation_checkpointing_enable()
        tiny.gradient_checkpointing_enable()
    for lengths in ([20, 17, 3, 20, 9], [12, 12, 12], [1, 30]):
        ids, mask = left_padded(seed, lengths, max(lengths))
        positions = (mask.cumsum(dim=1) - 1).clamp_min(0)  # as verl.trainer.batch computes them
        outs = [m(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True,
                  use_cache=False) for m in (hf, tiny)]
        assert torch.equal(outs[0].logits, outs[1].logits)
        assert len(outs[0].hidden_states) == len(outs[1].hidden_states) == shape.n_layer + 1
        assert all(torch.equal(a, b) for a, b in zip(outs[0].hidden_states, outs[1].hidden_states, strict=True))
        for out in outs:
            torch.log_softmax(out.logits, -1)[..., :40].sum().backward()
        grads = [{n: p.grad for n, p in m.named_parameters()} for m in (hf, tiny)]
        assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])
        hf.zero_grad()
        tiny.zero_grad()


def test_critic_backbone_same_values() -> None:
    hf_cfg, cfg = configs(TinyModelConfig(n_layer=3))
    torch.manual_seed(2)
    hf = ValueModel(gpt2().GPT2Model(hf_cfg), cfg.n_embd)
    torch.manual_seed(2)
    tiny = ValueModel(TinyTransformer(cfg), cfg.n_embd)
    ids, mask = left_padded(2, [14, 6, 10], 14)
    positions = (mask.cumsum(dim=1) - 1).clamp_min(0)
    assert torch.equal(hf(ids, mask, positions), tiny(ids, mask, positions))


def eos_bias(model: nn.Module, bias: float) -> None:
    """Push EOS up so that rows end at different steps (a random-init model almost never emits it)."""
    def hook(_m: nn.Module, _i: Any, logits: torch.Tensor) -> torch.Tensor:
        out = logits.clone()
        out[..., TOK.eos_token_id] += bias
        return out

    model.lm_head.register_forward_hook(hook)


def sampling(seed: int, rows: int, temperature: float) -> GumbelSampling:
    return GumbelSampling([torch.Generator().manual_seed(seed * 100 + i) for i in range(rows)], temperature)


def generate_both(hf: nn.Module, tiny: TinyCausalLM, ids: torch.Tensor, mask: torch.Tensor, new: int,
                  temperature: float, seed: int, synced: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    hf.eval()
    tiny.eval()
    theirs = hf_generate()(hf, ids, mask, new, TOK.eos_token_id, TOK.pad_token_id,
                                 sampling(seed, len(ids), temperature), synced)
    ours = tiny.generate(ids, mask, new, TOK.eos_token_id, TOK.pad_token_id, sampling(seed, len(ids), temperature),
                         synced)
    return theirs, ours


@pytest.mark.parametrize(("seed", "shape"), SHAPES[:2])
def test_same_tokens_from_generate(seed: int, shape: TinyModelConfig) -> None:
    hf, tiny = pair(seed, shape)
    for model in (hf, tiny):
        _printable_only(model)
        eos_bias(model, 3.0)
    seen_mid_batch_eos = seen_early_stop = False
    for lengths, new, temperature in (([20, 17, 3, 20, 9], 16, 1.0), ([12, 12, 12], 9, 0.7), ([1, 30], 25, 1.3),
                                      ([5, 8, 2, 11], 30, 1.0), ([4], 6, 0.5)):
        ids, mask = left_padded(seed, lengths, max(lengths))
        for attention in (mask, torch.ones_like(mask)):  # left-padded, and no padding at all
            theirs, ours = generate_both(hf, tiny, ids, attention, new, temperature, seed)
            assert torch.equal(theirs, ours), (lengths, new, temperature)
            response = ours[:, ids.shape[1]:]
            ended = (response == TOK.eos_token_id).any(dim=1)
            seen_mid_batch_eos |= bool(ended.any()) and bool((response == TOK.pad_token_id).any())
            seen_early_stop |= response.shape[1] < new
    assert seen_mid_batch_eos and seen_early_stop  # the cases above exercised padding after EOS and the stop


def test_same_tokens_and_collectives_with_synced_gpus_when_this_rank_finishes_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer rank still generating is played by ``all_reduce`` (both loops call it through
    ``torch.distributed``): it adds one unfinished rank for its first 15 calls. This rank finishes early
    and must keep running forwards, appending nothing, until the peer is done -- same tokens, same number
    of forwards and of collectives as transformers."""
    calls = {"all_reduce": 0, "forward": 0}

    def all_reduce(flag: torch.Tensor, op: Any = None) -> None:
        calls["all_reduce"] += 1
        if calls["all_reduce"] <= 15:
            flag += 1.0

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    hf, tiny = pair(4, TinyModelConfig())
    counts = []
    for model in (hf, tiny):
        _printable_only(model)
        eos_bias(model, 6.0)  # every row ends within a few steps
        model.lm_head.register_forward_hook(lambda *_: calls.__setitem__("forward", calls["forward"] + 1))
    ids, mask = left_padded(10, [9, 4, 7], 9)
    outs = []
    for generate in (functools.partial(hf_generate(), hf.eval()), tiny.eval().generate):
        calls.update(all_reduce=0, forward=0)
        outs.append(generate(ids, mask, 40, TOK.eos_token_id, TOK.pad_token_id, sampling(1, len(ids), 1.0), True))
        counts.append(dict(calls))
    assert torch.equal(outs[0], outs[1])
    assert outs[1].shape[1] < 9 + 10  # this rank finished well before its peer
    # 15 all-reduces with the peer unfinished, the 16th ends the loop; the prefill and 14 more forwards
    assert counts[0] == counts[1] == {"all_reduce": 16, "forward": 15}
    unsynced = generate_both(hf, tiny, ids, mask, 40, 1.0, seed=1)
    assert torch.equal(unsynced[0], outs[0]) and torch.equal(unsynced[1], outs[1])


def test_the_tiny_path_imports_no_transformers_and_deterministic_kernels_no_inductor() -> None:
    code = """
import sys
import torch
from verl.cli import train  # noqa: F401
from verl.config.schema import TinyModelConfig
from verl.data.loader import PromptItem
from verl.models.loading import load_causal_lm, load_critic, load_tokenizer
from verl.rollout.hf import HFRolloutEngine
from verl.models.preload import worker_preload
from verl.rollout.worker_engine import ModelSpec, SharedWeightsGenerator
from verl.trainer import RLTrainer  # noqa: F401
from verl.utils.clock import SimulatedClock

shape = TinyModelConfig()
actor = load_causal_lm("tiny", shape, 48, 0)
critic = load_critic("tiny", shape, 48, 0)
tok = load_tokenizer("tiny")
engine = HFRolloutEngine(actor, tok, response_length=6, max_prompt_length=24, temperature=1.0, seed=0,
                         clock=SimulatedClock(0.0))
assert len(engine.generate([PromptItem(1, "Q: hi A:"), PromptItem(2, "Q: a longer one A:")], step=1)) == 2
ids = torch.tensor([[72, 105]])
critic(ids, torch.ones_like(ids), torch.arange(2)[None])
shared = {k: v.clone() for k, v in actor.state_dict().items()}
gen = SharedWeightsGenerator(ModelSpec("tiny", shape, 48, 0), shared, torch.zeros(1, dtype=torch.int64),
                             {"response_length": 4, "max_prompt_length": 24, "temperature": 1.0, "seed": 0}, 1)
assert len(gen((1, [PromptItem(3, "Q: x A:")]), 0)) == 1
assert "verl.models.hf_loading" not in worker_preload("tiny")
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "transformers")
assert not loaded, loaded
from verl.utils.seeding import deterministic_kernels
deterministic_kernels()  # what trainer.deterministic (the default) asks for, without Inductor's import
assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
assert "torch._inductor" not in sys.modules
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_oom_degrader_switches_the_tiny_models_to_gradient_checkpointing() -> None:
    from verl.fault import enable_gradient_checkpointing

    actor, critic = load_causal_lm("tiny", TinyModelConfig(), 48, 0), load_critic("tiny", TinyModelConfig(), 48, 0)
    assert enable_gradient_checkpointing(actor) and enable_gradient_checkpointing(critic)
    assert all(block.checkpointed for model in (actor.transformer, critic.backbone) for block in model.h)
