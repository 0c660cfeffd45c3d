"""OOM degradation: an injected (real) torch.OutOfMemoryError degrades the component and the step completes.

The update under test is the trainer's own loop (``verl.trainer.update.run_update``) and the injection the
fault plan's ``StepOOM``: the degraded path proven here is the one the trainer runs."""

from __future__ import annotations

import pytest
import torch
from prometheus_client import CollectorRegistry, Counter, Gauge

from verl.fault import DegradedOOMError, OOMDegrader
from verl.trainer.fault_injection import StepOOM
from verl.trainer.update import MicroLoss, minibatch_indices, run_update


def critic_and_batch() -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    critic = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1))
    batch = {"obs": torch.randn(16, 6), "returns": torch.randn(16, 1)}
    return critic, torch.optim.SGD(critic.parameters(), lr=0.1), batch


def make_update(critic: torch.nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], seen: list[int]):
    def loss(idx: torch.Tensor) -> MicroLoss:
        value_loss = (critic(batch["obs"][idx]) - batch["returns"][idx]).pow(2).mean()
        return MicroLoss(value_loss, value_loss.item())

    def update(micro_batches: int) -> float:
        seen.append(micro_batches)
        return run_update(loss, list(critic.parameters()), opt, size=16, epochs=1, mini_batch_size=16,
                          micro_batches=micro_batches, grad_clip=1e9).loss

    return update


def metrics() -> tuple[Counter, Gauge]:
    reg = CollectorRegistry()
    return (Counter("verl_oom_events", "", ["component"], registry=reg),
            Gauge("verl_degraded_mode", "", ["component"], registry=reg))


def test_injected_oom_degrades_and_step_completes_with_same_update() -> None:
    critic, opt, batch = critic_and_batch()
    ref, ref_opt, _ = critic_and_batch()
    oom, degraded = metrics()
    seen: list[int] = []
    injected = StepOOM(at_step=2)
    guard = OOMDegrader("critic", model=critic, injector=injected, oom_counter=oom, degraded_gauge=degraded)
    ref_seen: list[int] = []
    for step in (1, 2, 3):
        injected.step = step
        guard.run(make_update(critic, opt, batch, seen))
        make_update(ref, ref_opt, batch, ref_seen)(1)
    # step 2 hit the OOM before any work, was retried with 4 micro-batches; the run then stays degraded
    assert seen == [1, 4, 4] and guard.degraded
    assert oom.labels(component="critic")._value.get() == 1
    assert degraded.labels(component="critic")._value.get() == 1
    # micro-batching changes memory, not maths: same weights as the never-degraded reference
    for a, b in zip(critic.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_second_oom_while_degraded_is_a_clear_error() -> None:
    critic, opt, batch = critic_and_batch()
    oom, degraded = metrics()
    injected = StepOOM(at_step=1, repeat=2)
    injected.step = 1
    guard = OOMDegrader("critic", injector=injected, oom_counter=oom, degraded_gauge=degraded)
    with pytest.raises(DegradedOOMError) as info:
        guard.run(make_update(critic, opt, batch, []))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("critic ran out of memory again in degraded mode")
    assert oom.labels(component="critic")._value.get() == 2


def test_runtime_oom_message_counts_other_errors_pass_through() -> None:
    guard = OOMDegrader("actor")
    calls = []

    def update(mb: int) -> int:
        calls.append(mb)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: out of memory")
        return mb

    assert guard.run(update) == 4 and guard.oom_events == 1
    with pytest.raises(ValueError, match="shape"):
        guard.run(lambda mb: (_ for _ in ()).throw(ValueError("shape mismatch")))
    assert guard.oom_events == 1


def test_degraded_state_survives_checkpoint_and_hf_model_gets_grad_checkpointing() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32))
    flag = "is_activation_checkpointing" if hasattr(model, "is_activation_checkpointing") else "is_gradient_checkpointing"
    assert not getattr(model, flag)
    guard = OOMDegrader("critic")
    guard.degrade()
    resumed = OOMDegrader("critic", model=model)
    resumed.load_state_dict(guard.state_dict())
    assert resumed.degraded and resumed.current_micro_batches == 4 and getattr(model, flag)


def test_micro_batches_cover_each_minibatch_once() -> None:
    seen: list[int] = []

    def loss(idx: torch.Tensor) -> MicroLoss:
        seen.extend(idx.tolist())
        return MicroLoss(torch.zeros((), requires_grad=True), 0.0)

    param = torch.nn.Parameter(torch.zeros(1))
    run_update(loss, [param], torch.optim.SGD([param], lr=0.1), size=10, epochs=2, mini_batch_size=4,
               micro_batches=4, grad_clip=1.0)
    assert seen == list(range(10)) * 2
    assert [len(i) for i in minibatch_indices(10, 4)] == [4, 4, 2]
