"""The ``faults:`` section as a fault plan: injections registered as ``StepHooks`` at stage boundaries
(``install_fault_plan``), never called from the step itself. They act on the real code paths: the dataloader stage really sleeps, kl_coef really becomes 0, memory is really allocated, the
process is really SIGKILLed. Reward hang/OOM, critic OOM, worker kills and slow checkpoint writes
act through the fault-tolerance components (circuit breaker, OOM degrader, worker supervisor,
checkpoint writer), never through a separate fake path.

Faults are planned by step number (``*_at_step``) or triggered at run time through
``faults.trigger_file`` (``FaultTrigger``): a JSON line appended there is read at the next step's
start and injected through the same components as the step-number faults, so a driver outside the
process (the soak) can place faults on wall time whatever the step rate.

GPU leak: the allocation is made on the actor's device. With a GPU, NVML sees it grow in
``verl_gpu_memory_used_bytes``; without one it is host memory (process RSS grows) and no GPU series is
invented — a simulated series must not pretend to be a GPU.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
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
        self.trigger: FaultTrigger | None = None  # faults.trigger_file, set by install_fault_plan

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
        self._hang_from: int | None = config.reward_hang_at_step
        self._hang_until: float | None = None
        self._release = threading.Event()  # set on close, so a hung call cannot outlive the trainer

    def hang_from(self, step: int) -> None:
        """Start a new hang of ``reward_hang_seconds`` at the first call of ``step`` (a runtime trigger;
        one still under way is restarted)."""
        self._hang_from, self._hang_until = step, None

    def score(self, texts: list[str]) -> list[float]:
        cfg = self.config
        if cfg.reward_oom_at_step is not None and self.step == cfg.reward_oom_at_step:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected fault: reward model, step {self.step})")
        if self._hang_from is not None and self.step >= self._hang_from:
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
    It is the ``OOMDegrader``'s ``injector`` (its public seam); the step is set by a ``STEP_START`` hook.
    ``add_step`` plans one more such step at run time (``faults.trigger_file``)."""

    def __init__(self, at_step: int | None, repeat: int = 1) -> None:
        self.at_steps: set[int] = set() if at_step is None else {at_step}
        self.repeat = repeat
        self.step = 0
        self._fired: dict[int, int] = {}

    def add_step(self, step: int) -> None:
        self.at_steps.add(step)

    def register(self, hooks: StepHooks) -> None:
        hooks.on(STEP_START, self._on_step_start)

    def _on_step_start(self, ctx: StepContext) -> None:
        self.step = ctx.step

    def maybe_raise(self, component: str) -> None:
        step = self.step
        if step not in self.at_steps or self._fired.get(step, 0) >= self.repeat:
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


def fail_checkpoint_writes(checkpointer: Any, steps: list[int]) -> None:
    """``faults.checkpoint_enospc_at_steps``: the saves of these steps fail with ENOSPC (a full disk) after
    their data files are written, so the partial shards exist and must be removed. Through
    ``CheckpointManager.before_commit`` and ``writing_step``, its public seams."""
    manager = getattr(checkpointer, "manager", None)
    if not steps or manager is None:
        return
    failing = set(steps)

    def disk_full() -> None:
        if manager.writing_step in failing:
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (faults.checkpoint_enospc_at_steps)")

    manager.before_commit.append(disk_full)


def kill_workers_at_steps(engine: Any, steps: list[int], num_workers: int) -> None:
    """``faults.kill_rollout_worker_at_steps`` through ``WorkerRolloutEngine.on_step`` (its public seam)."""
    engine.on_step = lambda pool, step: kill_worker_when_busy(pool, step % num_workers) if step in steps else None


class FaultTrigger:
    """``faults.trigger_file``: faults injected at run time. At each step's start the file is checked with
    one ``stat``; each complete new line, ``{"fault": "reward_hang"}`` or ``{"fault": "critic_oom"}``, is
    injected at that step through the same components as ``reward_hang_at_step`` (``FaultyReward``, behind
    the circuit breaker) and ``critic_oom_at_step`` (``StepOOM``, the OOM degrader's injector).

    Only lines appended after this process's first check count: a restarted (or hot-standby) trainer
    never re-injects what its predecessor already handled. A line that is not such an object is counted
    in ``bad_lines`` and the first one is logged; an unreadable file is logged once and retried. Neither
    ever stops training: a fault drill must not become a fault of its own."""

    def __init__(self, path: str | Path, faulty_reward: FaultyReward, step_oom: StepOOM) -> None:
        self.path = Path(path)
        self.inject: dict[str, Callable[[int], None]] = {"reward_hang": faulty_reward.hang_from,
                                                          "critic_oom": step_oom.add_step}
        self.bad_lines = 0
        self.injected: list[tuple[int, str]] = []  # (step, fault) in the order injected
        self._seen: tuple[int, int] | None = None  # (inode, offset) read up to; None before the first check
        self._read_error_logged = False

    def register(self, hooks: StepHooks) -> None:
        hooks.on(STEP_START, lambda ctx: self.poll(ctx.step))

    def poll(self, step: int) -> None:
        try:
            st = os.stat(self.path)
            inode, size = st.st_ino, st.st_size
        except FileNotFoundError:
            inode, size = 0, 0  # not written yet: every line the driver appends later is new
        except OSError as exc:
            self._log_read_error(exc)
            return
        if self._seen is None:
            self._seen = (inode, size)
            return
        seen_inode, offset = self._seen
        if inode != seen_inode or size < offset:
            offset = 0  # replaced or truncated: a new file, read from its start
        if size == offset:
            self._seen = (inode, offset)
            return
        try:
            with self.path.open("rb") as f:
                f.seek(offset)
                chunk = f.read(size - offset)
        except OSError as exc:
            self._log_read_error(exc)
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next check
        self._seen = (inode, offset + len(complete))
        for raw in complete.splitlines():
            if raw.strip():
                self._handle(raw, step)

    def _handle(self, raw: bytes, step: int) -> None:
        try:
            fault = json.loads(raw).get("fault")
        except (ValueError, AttributeError):
            fault = None
        inject = self.inject.get(fault) if isinstance(fault, str) else None
        if inject is None:
            self.bad_lines += 1
            if self.bad_lines == 1:
                log.warning("faults.trigger_file %s: ignored line %r: expected {\"fault\": one of %s} (further bad "
                            "lines are counted, not logged)", self.path, raw[:80].decode("utf-8", "replace"),
                            ", ".join(sorted(self.inject)))
            return
        log.warning("fault trigger: %s at step %d (from %s)", fault, step, self.path)
        inject(step)
        self.injected.append((step, fault))

    def _log_read_error(self, exc: OSError) -> None:
        if not self._read_error_logged:
            self._read_error_logged = True
            log.warning("faults.trigger_file %s cannot be read (%s); retried every step", self.path, exc)


def slow_rank(hooks: StepHooks, config: FaultsConfig, clock: Clock, rank: int) -> None:
    """``faults.slow_rank``: that rank sleeps inside its ``slow_rank_stage`` timer every step (a straggler);
    its peers then wait for it in their next collective, as they would for a slow GPU or host."""
    if config.slow_rank is None or config.slow_rank != rank:
        return
    current = StepContext(step=0)

    def note_step(ctx: StepContext) -> None:
        current.step = ctx.step

    def sleep_in_stage(stage: str) -> None:
        if current.step >= config.slow_rank_from_step:
            clock.sleep(config.slow_rank_seconds)

    hooks.on(STEP_START, note_step)
    hooks.on_stage(config.slow_rank_stage, sleep_in_stage)


def install_fault_plan(hooks: StepHooks, config: FaultsConfig, clock: Clock, device: torch.device, *,
                       step_oom: StepOOM, faulty_reward: FaultyReward, rollout: Any, num_workers: int,
                       checkpointer: Any, rank: int = 0) -> CoreFaults:
    """Register every injection of ``faults:`` at its stage boundary or component seam; returns the
    trainer-core faults (kept for their state, e.g. ``leaked_bytes``; ``trigger``: the runtime trigger)."""
    core = CoreFaults(config, clock, device)
    core.register(hooks)
    slow_rank(hooks, config, clock, rank)
    step_oom.register(hooks)
    if config.trigger_file:
        core.trigger = FaultTrigger(config.trigger_file, faulty_reward, step_oom)
        core.trigger.register(hooks)  # after StepOOM's hook: a critic OOM triggered now lands in this step
    hooks.on(BEFORE_REWARD, lambda ctx: setattr(faulty_reward, "step", ctx.step))
    if config.kill_rollout_worker_at_steps:
        if hasattr(rollout, "on_step"):
            kill_workers_at_steps(rollout, list(config.kill_rollout_worker_at_steps), num_workers)
        else:
            log.warning("faults.kill_rollout_worker_at_steps needs rollout_worker_num > 0 (hf engine): ignored")
    delay_checkpoint_writes(checkpointer, config.checkpoint_write_delay_s)
    fail_checkpoint_writes(checkpointer, list(config.checkpoint_enospc_at_steps))
    return core
