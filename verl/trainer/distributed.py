"""torchrun integration: process group, placement, and rank-averaging of step statistics."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from verl.config.errors import TrainerConfigError


class CollectiveWaits:
    """Seconds this rank spent blocked in collectives (a running total; ``StageTimer`` takes differences).

    A collective returns only when every rank has arrived, so a rank's stage time holds its peers' lateness;
    timing the collectives apart leaves each rank's own compute (the time a straggler is scored on). Real
    time (``time.monotonic``), not the injected clock: the wait is the process group's, never simulated."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()  # the DDP hook's callback adds from the process group's thread

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += max(0.0, seconds)

    @contextmanager
    def timed(self) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(time.monotonic() - start)


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    own_group: bool = False
    """A one-rank process group made for FSDP without torchrun (destroyed by ``shutdown``)."""
    waits: CollectiveWaits = field(default_factory=CollectiveWaits, compare=False, repr=False)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        """One metrics endpoint per node, served by its local rank 0."""
        return self.local_rank == 0


def init_distributed(backend: str = "auto", single_process_group: bool = False) -> DistContext:
    """Join the torchrun process group when launched by torchrun (WORLD_SIZE > 1). One process with
    ``single_process_group`` (FSDP needs a device mesh) gets a one-rank group on an in-memory store."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        if not single_process_group or dist.is_initialized():
            return DistContext()
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        return DistContext(own_group=True)
    ctx = DistContext(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(ctx.local_rank)
        dist.init_process_group(backend=backend)
    return ctx


def resolve_device(spec: str, ctx: DistContext, key: str) -> torch.device:
    """auto -> cuda:LOCAL_RANK when CUDA exists, else cpu; 'cuda' alone means this rank's GPU."""
    if spec == "auto":
        return torch.device(f"cuda:{ctx.local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise TrainerConfigError(f"config key '{key}' is '{spec}' but no CUDA device is available; use cpu or auto")
    if spec == "cuda":
        return torch.device(f"cuda:{ctx.local_rank}")
    try:
        return torch.device(spec)
    except RuntimeError:
        raise TrainerConfigError(f"config key '{key}': '{spec}' is not a device; use auto, cpu, cuda or cuda:N") from None


@dataclass(frozen=True)
class Placement:
    """One device per component (the article: actor on an A100, the reward model on a V100)."""

    actor: torch.device
    critic: torch.device
    reference: torch.device
    reward: torch.device


def resolve_placement(cfg: Any, ctx: DistContext) -> Placement:
    reward_spec = "cpu" if cfg.offload_reward_to_cpu else cfg.reward.device
    return Placement(resolve_device(cfg.actor.device, ctx, "actor.device"),
                     resolve_device(cfg.critic.device, ctx, "critic.device"),
                     resolve_device(cfg.reference.device, ctx, "reference.device"),
                     resolve_device(reward_spec, ctx, "reward.device"))


def mean_across_ranks(values: list[float], ctx: DistContext) -> list[float]:
    if not ctx.distributed or not values:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    with ctx.waits.timed():
        dist.all_reduce(tensor)
    return (tensor / ctx.world_size).tolist()


def shutdown(ctx: DistContext) -> None:
    if (ctx.distributed or ctx.own_group) and dist.is_initialized():
        dist.destroy_process_group()


def gather_objects(value: Any, ctx: DistContext) -> list[Any]:
    """``[value of rank 0, value of rank 1, ...]`` on every rank (``[value]`` without torchrun)."""
    if not ctx.distributed:
        return [value]
    out: list[Any] = [None] * ctx.world_size
    with ctx.waits.timed():
        dist.all_gather_object(out, value)
    return out


def gather_rows(values: list[float], ctx: DistContext) -> list[list[float]]:
    """``values`` of every rank, in rank order, on every rank (one ``all_gather`` of a small float64 tensor)."""
    if not ctx.distributed:
        return [list(values)]
    mine = torch.tensor(values, dtype=torch.float64)
    rows = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    with ctx.waits.timed():
        dist.all_gather(rows, mine)
    return [r.tolist() for r in rows]


def any_across_ranks(flag: bool, ctx: DistContext) -> bool:
    """True on every rank when it is true on any rank (a MAX all-reduce)."""
    if not ctx.distributed:
        return flag
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int64)
    with ctx.waits.timed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def timed_gradient_allreduce(waits: CollectiveWaits) -> Any:
    """A DDP comm hook: the default gradient all-reduce, timing the wait that follows this rank's last bucket.

    DDP reduces gradient buckets inside ``backward()`` while the rank still computes; once its last bucket
    is ready the rank's own work is done and what remains, until that bucket's reduction completes, is
    waiting for the peers (and the wire). On CUDA the future completes with the NCCL work on the stream,
    so the figure there is the host-side view of it."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    # unannotated: DDP checks the hook's annotations as objects, and this module's are strings
    def hook(process_group, bucket):  # type: ignore[no-untyped-def]
        fut = allreduce_hook(process_group, bucket)
        if not bucket.is_last():
            return fut
        ready = time.monotonic()

        def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            waits.add(time.monotonic() - ready)
            return f.value()

        return fut.then(done)

    return hook
