"""One PPO update loop, shared by the actor and the critic (CleanRL's ``for epoch: for minibatch:``).

``run_update`` does ``epochs`` passes over the batch in order, one mini-batch at a time; each mini-batch is split into
``micro_batches`` chunks whose losses are back-propagated scaled by their share, so the gradient equals
the full mini-batch's (micro-batching changes memory, not maths: the OOM degrader's retry with 4 chunks
is this same loop, proven by ``tests/verl/ft/test_ft_oom.py``). A non-finite loss or gradient norm skips
that optimizer step and is reported, never applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class MicroLoss:
    """One chunk's loss: ``objective`` is back-propagated, ``loss`` reported (the actor's objective adds an
    entropy bonus to the policy loss it reports), ``stats`` are per-chunk figures to average."""

    objective: torch.Tensor
    loss: float
    stats: dict[str, float] = field(default_factory=dict)


LossFn = Callable[[torch.Tensor], MicroLoss]
"""``loss_fn(index)``: the loss of the batch rows ``index``."""


@dataclass
class UpdateResult:
    loss: float = math.nan
    grad_norm: float = math.nan
    nonfinite: bool = False
    stats: dict[str, float] = field(default_factory=dict)
    """Per-chunk figures averaged over the update (the actor's ``clipfrac``, ``entropy``)."""

    def stat(self, name: str) -> float:
        return self.stats.get(name, math.nan)


def minibatch_indices(size: int, mini_batch_size: int) -> list[torch.Tensor]:
    mini = min(mini_batch_size, size)
    return [torch.arange(i, min(i + mini, size)) for i in range(0, size, mini)]


def run_update(loss_fn: LossFn, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, *, size: int,
               epochs: int, mini_batch_size: int, micro_batches: int, grad_clip: float) -> UpdateResult:
    losses: list[float] = []
    norms: list[float] = []
    stats: dict[str, list[float]] = {}
    nonfinite = False
    for _ in range(epochs):
        for idx in minibatch_indices(size, mini_batch_size):
            optimizer.zero_grad(set_to_none=True)
            chunks = idx.chunk(micro_batches)
            for micro in chunks:
                out = loss_fn(micro)
                (out.objective * len(micro) / len(idx)).backward()
                losses.append(out.loss)
                for name, value in out.stats.items():
                    stats.setdefault(name, []).append(value)
            total = torch.nn.utils.clip_grad_norm_(params, grad_clip)
            # FSDP: the norm of sharded gradients is a DTensor (partial per rank); its full value is global
            norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
            norms.append(norm)
            if math.isfinite(norm) and all(math.isfinite(v) for v in losses[-len(chunks):]):
                optimizer.step()
            else:
                nonfinite = True
    return UpdateResult(_mean(losses), _mean(norms), nonfinite, {k: _mean(v) for k, v in stats.items()})


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
