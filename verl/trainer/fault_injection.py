"""The ``faults:`` section as a fault plan: injections registered as ``StepHooks`` at stage boundaries
(``install_fault_plan``), never called from the step itself. They act on the real code paths: the dataloader stage really sleeps, kl_coef really becomes 0, memory is really allocated, the
process is really SIGKILLed. Reward hang/OOM, critic OOM, worker kills and slow checkpoint writes
act through the fault-tolerance components (circuit breaker, OOM degrader, worker supervisor,
checkpoint writer), never through a separate fake path.

GPU leak: the allocation is made on the actor's device. With a GPU, NVML sees it grow in
``verl_gpu_memory_used_bytes``; without one it is host memory (process RSS grows) and no GPU series is
invented — a simulated series must not pretend to be a GPU.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

import torch

from verl.config.schema import FaultsConfig
from verl.trainer.stages import (
    AFTER_ROLLOUT,
    AFTER_UPDATES,
    BEFORE_ADVANTAGES,
    BEFORE_REWARD,
    STEP_END,
    STEP_START,
    StepContext,
    StepHooks,
)
from verl.utils.clock import Clock

log = logging.getLogger(__name__)
MiB = 1024 * 1024


class CoreFaults:
    def __init__(self, config: FaultsConfig, clock: Clock, device: torch.device) -> None:
        self.config = config
        self.clock = clock
        self.device = device
        self._leak: list[torch.Tensor] = []
        self._leak_bytes = 0
        self._started = clock.monotonic()
        self._slept = 0.0
        self._last_work_seconds = 0.0

    def throughput_sleep(self, step: int, last_work_seconds: float) -> None:
        """Sleep so that step time becomes work / factor, i.e. tokens/s is multiplied by the factor."""
        at = self.config.throughput_drop_at_step
        if at is None or step < at or last_work_seconds <= 0:
            return
        self.clock.sleep(last_work_seconds * (1.0 / self.config.throughput_drop_factor - 1.0))

    def register(self, hooks: StepHooks) -> None:
        hooks.on(STEP_START, self._on_step_start)
        hooks.on(AFTER_ROLLOUT, lambda ctx: self.maybe_kill(ctx.step))
        hooks.on(BEFORE_ADVANTAGES, self._on_advantages)
        hooks.on(AFTER_UPDATES, lambda ctx: self.grow_leak())
        hooks.on(STEP_END, self._on_step_end)

    def _on_step_start(self, ctx: StepContext) -> None:
        t = self.clock.monotonic()
        self.throughput_sleep(ctx.step, self._last_work_seconds)
        self._slept = self.clock.monotonic() - t

    def _on_step_end(self, ctx: StepContext) -> None:
        # the work of a step is its time without this plan's own sleep, so the drop factor stays exact
        self._last_work_seconds = ctx.step_seconds - self._slept

    def _on_advantages(self, ctx: StepContext) -> None:
        ctx.kl_coef = self.kl_coef(ctx.step, ctx.kl_coef)

    def kl_coef(self, step: int, value: float) -> float:
        at = self.config.kl_drift_at_step
        return 0.0 if at is not None and step >= at else value

    def maybe_kill(self, step: int) -> None:
        if self.config.kill_trainer_at_step is not None and step == self.config.kill_trainer_at_step:
            log.warning("fault injection: SIGKILL trainer at step %d", step)
            os.kill(os.getpid(), signal.SIGKILL)

    def grow_leak(self) -> None:
        rate = self.config.gpu_leak_mb_per_min
        if rate <= 0:
            return
        minutes = (self.clock.monotonic() - self._started) / 60.0
        missing = int(rate * minutes * MiB) - self._leak_bytes
        if missing >= MiB:
            self._leak.append(torch.ones(missing, dtype=torch.uint8, device=self.device))
            self._leak_bytes += missing

    @property
    def leaked_bytes(self) -> int:
        return self._leak_bytes


class FaultyReward:
    """The reward model as the ``faults:`` section sees it: the real model, except that from
    ``reward_hang_at_step`` its calls block (far beyond ``reward.timeout_s``) until
    ``reward_hang_seconds`` of wall time have passed since the hang began, and at
    ``reward_oom_at_step`` they raise a real ``torch.OutOfMemoryError``. The circuit breaker wraps
    this object, so timeouts, OOM outcomes and the recovery probe all run on the production path."""

    def __init__(self, model: Any, config: FaultsConfig) -> None:
        self.model = model
        self.config = config
        self.step = 0
        self._hang_until: float | None = None
        self._release = threading.Event()  # set on close, so a hung call cannot outlive the trainer

    def score(self, texts: list[str]) -> list[float]:
        cfg = self.config
        if cfg.reward_oom_at_step is not None and self.step == cfg.reward_oom_at_step:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected fault: reward model, step {self.step})")
        if cfg.reward_hang_at_step is not None and self.step >= cfg.reward_hang_at_step:
            # wall time on purpose: a hang is a property of the outside world, not of the training clock
            if self._hang_until is None:
                self._hang_until = time.monotonic() + cfg.reward_hang_seconds
                log.warning("fault injection: reward model hangs for %.0fs from step %d", cfg.reward_hang_seconds,
                            self.step)
            self._release.wait(max(0.0, self._hang_until - time.monotonic()))
        return self.model.score(texts)

    def close(self) -> None:
        self._release.set()


class StepOOM:
    """``faults.critic_oom_at_step``: the first ``repeat`` attempts of that step's critic update raise a
    real ``torch.OutOfMemoryError`` (the exception the CUDA allocator raises), before any work is done.
    It is the ``OOMDegrader``'s ``injector`` (its public seam); the step is set by a ``STEP_START`` hook."""

    def __init__(self, at_step: int | None, repeat: int = 1) -> None:
        self.at_step, self.repeat = at_step, repeat
        self.step = 0
        self._fired: dict[int, int] = {}

    def register(self, hooks: StepHooks) -> None:
        hooks.on(STEP_START, self._on_step_start)

    def _on_step_start(self, ctx: StepContext) -> None:
        self.step = ctx.step

    def maybe_raise(self, component: str) -> None:
        step = self.step
        if self.at_step is None or step != self.at_step or self._fired.get(step, 0) >= self.repeat:
            return
        self._fired[step] = self._fired.get(step, 0) + 1
        raise torch.OutOfMemoryError(f"CUDA out of memory (injected fault: {component} update, step {step})")


def kill_worker_when_busy(pool: Any, index: int, timeout_s: float = 5.0) -> threading.Thread:
    """``faults.kill_rollout_worker_at_steps``: SIGKILL worker ``index`` as soon as it holds prompts in
    flight, so the kill lands mid-step and the supervisor has unacknowledged prompts to re-queue."""

    def run() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pool.busy(index):
                break
            time.sleep(0.002)
        try:
            pid = pool.kill_worker(index)
            log.warning("fault injection: SIGKILL rollout worker %d (pid %d)", index, pid)
        except (IndexError, ProcessLookupError):
            pass

    thread = threading.Thread(target=run, name="fault-kill-worker", daemon=True)
    thread.start()
    return thread


def delay_checkpoint_writes(checkpointer: Any, seconds: float) -> None:
    """``faults.checkpoint_write_delay_s``: the background writer pauses after the data files of a save
    and before its meta.json/COMPLETE, so a SIGKILL can land mid-save (a directory full of shards with no
    marker, which resume must ignore). Through ``CheckpointManager.before_commit``, its public seam."""
    manager = getattr(checkpointer, "manager", None)
    if seconds <= 0 or manager is None:
        return
    manager.before_commit.append(lambda: time.sleep(seconds))


def kill_workers_at_steps(engine: Any, steps: list[int], num_workers: int) -> None:
    """``faults.kill_rollout_worker_at_steps`` through ``WorkerRolloutEngine.on_step`` (its public seam)."""
    engine.on_step = lambda pool, step: kill_worker_when_busy(pool, step % num_workers) if step in steps else None


def install_fault_plan(hooks: StepHooks, config: FaultsConfig, clock: Clock, device: torch.device, *,
                       step_oom: StepOOM, faulty_reward: FaultyReward, rollout: Any, num_workers: int,
                       checkpointer: Any) -> CoreFaults:
    """Register every injection of ``faults:`` at its stage boundary or component seam; returns the
    trainer-core faults (kept for their state, e.g. ``leaked_bytes``)."""
    core = CoreFaults(config, clock, device)
    core.register(hooks)
    step_oom.register(hooks)
    hooks.on(BEFORE_REWARD, lambda ctx: setattr(faulty_reward, "step", ctx.step))
    if config.kill_rollout_worker_at_steps:
        if hasattr(rollout, "on_step"):
            kill_workers_at_steps(rollout, list(config.kill_rollout_worker_at_steps), num_workers)
        else:
            log.warning("faults.kill_rollout_worker_at_steps needs rollout_worker_num > 0 (hf engine): ignored")
    delay_checkpoint_writes(checkpointer, config.checkpoint_write_delay_s)
    return core
