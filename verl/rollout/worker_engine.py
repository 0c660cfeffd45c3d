"""Generation in supervised worker processes (``rollout_worker_num > 0``).

The trainer keeps a CPU copy of the actor's weights in shared memory; every worker process maps the
same storage, so ``sync_weights`` is one in-place copy in the trainer and the next ``generate`` in any
worker (including one restarted after a crash) uses the current weights. A shared version counter
tells a worker when to reload its local model from the shared tensors.

Prompts go out in fixed chunks of ``rollout.worker_chunk_size``; a chunk's responses come from the same
Gumbel-max sampler as in-process generation, seeded per (seed, step, prompt_id), so the result does not
depend on which worker ran the chunk or how often it was re-queued. The supervisor
(``verl.workers.RolloutWorkerPool``) re-queues the unacknowledged chunks of a dead worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from verl.data.buffer import Rollout
from verl.data.loader import PromptItem
from verl.models.loading import load_causal_lm, load_tokenizer
from verl.models.preload import worker_preload
from verl.rollout.hf import HFRolloutEngine
from verl.utils.clock import Clock, SystemClock
from verl.utils.seeding import derive_seed

log = logging.getLogger(__name__)


@dataclass
class ModelSpec:
    """What a worker needs to build the actor's architecture (its values come from shared memory)."""

    model: str
    tiny: Any
    n_positions: int
    seed: int


class SharedWeightsGenerator:
    """The picklable generate function the workers run: ``(step, [PromptItem]) -> [Rollout]``."""

    def __init__(self, spec: ModelSpec, shared: dict[str, torch.Tensor], version: torch.Tensor,
                 gen_kwargs: dict[str, Any], torch_threads: int) -> None:
        self.spec, self.shared, self.version = spec, shared, version
        self.gen_kwargs, self.torch_threads = gen_kwargs, torch_threads
        self._engine: Any = None
        self._loaded = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None, "_loaded": -1}  # the model is rebuilt in each worker

    def _ensure_engine(self) -> Any:
        if self._engine is None:
            if self.torch_threads > 0:
                torch.set_num_threads(self.torch_threads)
            model = load_causal_lm(self.spec.model, self.spec.tiny, self.spec.n_positions, self.spec.seed)
            self._engine = HFRolloutEngine(model=model.eval(), tokenizer=load_tokenizer(self.spec.model),
                                           clock=SystemClock(), **self.gen_kwargs)
        version = int(self.version.item())
        if version != self._loaded:
            self._engine.model.load_state_dict(self.shared)
            self._loaded = version
        return self._engine

    def __call__(self, task: tuple[int, list[PromptItem]], seed: int) -> list[Rollout]:
        step, prompts = task
        return self._ensure_engine().generate(prompts, step)


class WorkerRolloutEngine:
    """``RolloutEngine`` backed by ``RolloutWorkerPool``; ``on_step`` runs once ``generate`` has
    dispatched work (the ``faults:`` kill hook uses it)."""

    def __init__(self, actor: nn.Module, spec: ModelSpec, gen_kwargs: dict[str, Any], num_workers: int,
                 chunk_size: int, seed: int, clock: Clock, torch_threads: int = 1, metrics: Any = None) -> None:
        from verl.workers import RolloutWorkerPool, start_worker_server

        self.clock = clock
        self.seed = seed
        self.chunk_size = max(1, chunk_size)
        self.shared = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in actor.state_dict().items()}
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.on_step: Callable[[Any, int], None] | None = None
        fn = SharedWeightsGenerator(spec, self.shared, self.version, gen_kwargs, torch_threads)
        # a no-op when verl-train already started it (before its own imports, so both run in parallel)
        start_worker_server(worker_preload(spec.model))
        m = metrics
        self.pool = RolloutWorkerPool(
            fn, num_workers, start_method="forkserver",
            alive_gauge=m["verl_rollout_workers_alive"] if m is not None else None,
            restarts_counter=m["verl_rollout_worker_restarts_total"] if m is not None else None,
            cpu_gauge=m["verl_rollout_worker_cpu_ratio"] if m is not None else None,
        ).start()
        self.results = 0  # rollouts delivered (the trainer's reconcile() checks them against the prompts)

    def sync_weights(self, actor: nn.Module) -> None:
        with torch.no_grad():
            for name, tensor in actor.state_dict().items():
                self.shared[name].copy_(tensor.detach().to("cpu"))
        self.version += 1

    def generate(self, prompts: list[PromptItem], step: int) -> list[Rollout]:
        from verl.workers import RolloutTask

        chunks = [prompts[i:i + self.chunk_size] for i in range(0, len(prompts), self.chunk_size)]
        tasks = [RolloutTask(i, (step, chunk), derive_seed(self.seed, "rollout-task", step, chunk[0].prompt_id))
                 for i, chunk in enumerate(chunks)]
        if self.on_step is not None:
            self.on_step(self.pool, step)
        results = self.pool.map(tasks)
        now = self.clock.now()  # the trainer's clock, not the worker's: buffer ages stay on injected time
        out: list[Rollout] = []
        for chunk, result in zip(chunks, results, strict=True):
            if result.error is not None:
                raise RuntimeError(f"rollout worker failed on prompts {[p.prompt_id for p in chunk]}: {result.error}")
            out.extend(replace(r, created_at=now) for r in result.output)
        self.results += len(out)
        return out

    def close(self) -> None:
        self.pool.close()
