"""``RLTrainer``: composes the parts of a PPO run and drives the loop; one PPO step per ``step()``.

    placement/distributed  verl.trainer.distributed   (torchrun, one device per component)
    data                   RLDataLoader + RolloutBuffer + data guards (verl.trainer.guards)
    models                 verl.trainer.build         (actor, reference, critic, optimizers, KL control, rollout)
    guards                 verl.trainer.guards (reward circuit breaker, OOM degraders, guards)
    fault plan             verl.trainer.fault_injection (``faults:`` as hooks at stage boundaries)
    the step's parts       verl.trainer.parts         (``StepParts``: built once, handed to the step)
    checkpoint state       verl.trainer.checkpoint_state (each part's state_dict, gathered per rank)
    telemetry              verl.trainer.telemetry     (metrics, /metrics + /health, progress line)
    the step               verl.trainer.ppo_step      (rollout -> reward -> reference -> advantages -> updates)

The trainer keeps what outlives a step: the step counter, the checkpointer and the telemetry. Plug-in seams,
chosen at construction: ``reward`` (anything with ``.score(texts)``, assignable later), ``checkpointer``;
the step reads ``rollout``, ``loader``, ``buffer`` and ``hooks`` (``StepHooks``) from ``parts``.
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from verl.checkpoint import make_checkpointer
from verl.config import Config, TrainerConfigError, TrainingStopped, load_config
from verl.data.buffer import RolloutBuffer
from verl.data.loader import PromptDataset, RLDataLoader
from verl.metrics.registry import MetricsRegistry
from verl.metrics.sink import StepStats
from verl.models.reward import load_reward_model
from verl.trainer.build import build_models, build_rollout
from verl.trainer.checkpoint_state import load_trainer_state, param_digest, trainer_state
from verl.trainer.distributed import (
    DistContext,
    any_across_ranks,
    init_distributed,
    resolve_placement,
    shutdown,
)
from verl.trainer.fault_injection import install_fault_plan
from verl.trainer.guards import build_data_guards, build_reward_path, build_update_guards
from verl.trainer.parts import StepParts
from verl.trainer.ppo_step import ppo_step, step_stats
from verl.trainer.reward_stage import RewardStage
from verl.trainer.stages import STEP_END, StageTimer, StepContext, StepHooks
from verl.trainer.telemetry import Telemetry
from verl.utils.clock import Clock, SystemClock
from verl.utils.seeding import deterministic_kernels, seed_everything

log = logging.getLogger("verl.trainer")


class Checkpointer(Protocol):
    """Implemented by the fault-tolerance checkpoint component (``verl.checkpoint``). Optional too:
    ``snapshot(trainer, step) -> stall_s``, the in-memory tier's per-step save (``checkpoint.memory_interval``)."""

    def save(self, trainer: RLTrainer, step: int, final: bool = False) -> float:
        """Save (async where configured); returns seconds the step was blocked."""

    def resume(self, trainer: RLTrainer) -> int | None:
        """Load the newest complete checkpoint into ``trainer``; its step, or None when there is none."""

    def close(self) -> None: ...


@dataclass
class TrainResult:
    steps: int
    rewards: list[float] = field(default_factory=list)
    tokens_per_second: list[float] = field(default_factory=list)
    metrics_url: str | None = None

    @property
    def reward_first10(self) -> float:
        return _mean(self.rewards[:10])

    @property
    def reward_last10(self) -> float:
        return _mean(self.rewards[-10:])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


class RLTrainer:
    def __init__(self, config: Config | str | Path = "ppo_tiny", checkpoint_dir: str | Path | None = None, *,
                 overrides: list[str] | tuple[str, ...] = (), clock: Clock | None = None,
                 metrics_registry: MetricsRegistry | None = None) -> None:
        self.config = config if isinstance(config, Config) else load_config(str(config), overrides)
        cfg = self.config
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.clock = clock or SystemClock()
        fsdp = "fsdp" in (cfg.actor.strategy, cfg.critic.strategy)
        self.ctx: DistContext = init_distributed(cfg.trainer.dist_backend, single_process_group=fsdp)
        try:
            self._build(cfg, metrics_registry)
        except BaseException:
            # A bad reward path or fault plan fails here, after the process group, the DDP wrappers and
            # perhaps the rollout workers exist: left to interpreter exit, the wrappers free the group
            # with the GIL held (the exit deadlock ``PPOModels.release_ddp`` describes) and the workers
            # outlive the rank. The original error is the one raised.
            self._close_built()
            raise

    def _build(self, cfg: Config, metrics_registry: MetricsRegistry | None) -> None:
        if cfg.trainer.torch_threads > 0:
            torch.set_num_threads(cfg.trainer.torch_threads)
        seed_everything(cfg.trainer.seed + self.ctx.rank)
        if cfg.trainer.deterministic:
            deterministic_kernels()
        self.placement = resolve_placement(cfg, self.ctx)

        self.registry = metrics_registry or MetricsRegistry()
        # Data first: a missing dataset should fail before any model is built.
        self.data_guards = build_data_guards(cfg, self.registry)
        self.loader = RLDataLoader(
            PromptDataset(cfg.data.prompt_dataset, cfg.data.prompt_key), cfg.data.batch_size,
            seed=cfg.trainer.seed, shuffle=cfg.data.shuffle, num_workers=cfg.data.num_workers,
            persistent_workers=cfg.data.persistent_workers, pin_memory=cfg.data.pin_memory,
            rank=self.ctx.rank, world_size=self.ctx.world_size, clusters=self.data_guards.clusters,
        )
        if self.loader.duplicates_removed:
            log.info("data guard: %d near-duplicate prompts removed", self.loader.duplicates_removed)
        self.buffer = RolloutBuffer(cfg.rollout_buffer_max_size, cfg.rollout_buffer_eviction_policy)

        self.models = build_models(cfg, self.ctx, self.placement)
        m = self.models  # the names the checkpoint hook and tests use
        self.tokenizer, self.actor, self.reference, self.critic = m.tokenizer, m.actor, m.reference, m.critic
        self.actor_optim, self.critic_optim = m.actor_optim, m.critic_optim

        self.updates = build_update_guards(cfg, m, self.registry)
        base_reward = load_reward_model(cfg.reward.path, device=str(self.placement.reward),
                                        batch_size=cfg.reward_batch_size)
        self.reward_path = build_reward_path(base_reward, cfg, self.clock, self.registry)
        self.reward_stage = RewardStage(cfg, self.reward_path, self.data_guards, self.buffer, self.registry,
                                        self.clock, self.ctx)
        self.rollout: Any = build_rollout(cfg, m, self.clock, self.registry)
        self.checkpointer: Checkpointer | None = _default_checkpointer(self)
        self.hooks = StepHooks()
        self.fault_plan = install_fault_plan(
            self.hooks, cfg.faults, self.clock, self.placement.actor, step_oom=self.updates.injected,
            faulty_reward=self.reward_path.faulty, rollout=self.rollout, num_workers=cfg.rollout_worker_num,
            checkpointer=self.checkpointer, rank=self.ctx.rank)
        self.telemetry = Telemetry(cfg, self.ctx, self.registry, self.clock, self.buffer, m.n_layers)
        self.metrics = self.telemetry.metrics
        self.parts = StepParts(cfg, self.ctx, self.placement, m, self.loader, self.buffer, self.data_guards,
                               self.reward_stage, self.rollout, self.updates, self.hooks, self.registry)

        self.global_step = 0

    @property
    def stop_reason(self) -> str | None:
        """Set when the run must stop after this step (out of memory again while degraded)."""
        return self.updates.stop_reason

    @property
    def reward(self) -> Any:
        """The reward seam: the circuit-breaker-wrapped model, or any ``.score(texts)`` object assigned here."""
        return self.reward_stage.reward

    @reward.setter
    def reward(self, model: Any) -> None:
        self.reward_stage.reward = model

    def start_metrics_server(self, host: str | None = None, port: int | None = None) -> str | None:
        """Serve /metrics on this node's local rank 0; returns the URL (None on other ranks)."""
        return self.telemetry.start_server(self.health, host, port)

    def health(self) -> dict[str, Any]:
        degraded = [name for name, d in (("critic", self.updates.critic), ("actor", self.updates.actor)) if d.degraded]
        return {"status": "ok", "global_step": self.global_step, "rank": self.ctx.rank,
                "world_size": self.ctx.world_size, "reward_circuit": self.reward_path.breaker.state.name.lower(),
                "degraded": degraded}

    # ---- state for checkpoints (verl.trainer.checkpoint_state) ------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything stateful except model parameters, optimizer state and RNG streams (the checkpointer
        saves and restores those itself)."""
        return trainer_state(self.parts, self.global_step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = load_trainer_state(self.parts, state)

    def param_digest(self) -> str:
        return param_digest(self.models)

    # ---- the loop -------------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: bool = False, resume_or_start: bool = False,
              after_first_step: Callable[[], None] | None = None) -> TrainResult:
        """``resume_from_checkpoint``: continue from the newest complete checkpoint, and raise
        ``TrainerConfigError`` when there is none (a mistyped directory must not silently start over);
        ``resume_or_start`` also allows that fresh start. ``after_first_step`` runs once, after this
        process's first step (``verl-train`` starts a resumed run's /metrics there)."""
        cfg = self.config
        acquire = getattr(self.checkpointer, "acquire", None)
        if acquire is not None:
            acquire()  # one writer per checkpoint directory: a second trainer stops here (exit 2)
        if resume_from_checkpoint:
            self._resume(resume_or_start)
        log.info("rank=%d step=%d initial param_sha256=%s", self.ctx.rank, self.global_step, self.param_digest())
        url = self.telemetry.url
        result = TrainResult(steps=0, metrics_url=url)
        sigterm = _SigtermFlag.install() if cfg.checkpoint.save_on_sigterm and self.checkpointer is not None else None
        try:
            while self.global_step < cfg.trainer.total_steps:
                if sigterm is not None and any_across_ranks(sigterm.requested, self.ctx):
                    self._save_on_sigterm()
                    result.steps = self.global_step
                    return result
                stats = self.step()
                result.rewards.append(stats.reward_mean)
                result.tokens_per_second.append(stats.tokens_per_second)
                self.telemetry.report(stats)
                if after_first_step is not None:
                    after_first_step()
                    after_first_step = None
                if self.stop_reason is not None:
                    self._stop()
            if self.checkpointer is not None:
                self.checkpointer.save(self, self.global_step, final=True)
        finally:
            if sigterm is not None:
                sigterm.uninstall()
            release = getattr(self.checkpointer, "release", None)
            if release is not None:
                release()  # nothing writes the directory between train() calls; a later train() locks again
            self.telemetry.end_progress_line()
        result.steps = self.global_step
        if self.ctx.is_main:
            log.info("finished step=%d reward_first10=%.4f reward_last10=%.4f", self.global_step,
                     result.reward_first10, result.reward_last10)
        log.info("rank=%d step=%d param_sha256=%s", self.ctx.rank, self.global_step, self.param_digest())
        return result

    def _save_on_sigterm(self) -> None:
        """SIGTERM arrived (checked between steps, on every rank at the same step): finish the save in
        flight or checkpoint the last finished step, within ``checkpoint.sigterm_grace_s``; train() then
        returns normally and verl-train exits 0."""
        grace = self.config.checkpoint.sigterm_grace_s
        save = getattr(self.checkpointer, "save_on_signal", None)
        if save is not None:
            what = save(self, self.global_step, grace)
        else:
            self.checkpointer.save(self, self.global_step, final=True)  # type: ignore[union-attr]
            what = f"checkpoint global_step_{self.global_step} complete"
        log.warning("SIGTERM: stopping after step %d: %s", self.global_step, what)

    def _stop(self) -> None:
        """Checkpoint the step just finished (its failed update skipped), then stop with one line."""
        where = "no checkpoint_dir: nothing saved"
        if self.checkpointer is not None:
            self.checkpointer.save(self, self.global_step, final=True)
            where = f"checkpoint global_step_{self.global_step} written; fix it, then --resume"
        raise TrainingStopped(f"{self.stop_reason} ({where})")

    def _resume(self, start_if_missing: bool = False) -> None:
        step = None
        if self.checkpointer is not None:
            step = self.checkpointer.resume(self)
        if step is not None:
            # rollout worker processes were built with the initial weights: without this the first step
            # after a resume generated from the initial policy (caught by the hot-standby soak: reward
            # 0.69 -> 0.14 for one step)
            self.rollout.sync_weights(self.actor)
            log.info("resumed from step %s", step)
            return
        if not start_if_missing:
            found = sorted(glob.glob(str(self.checkpoint_dir / "global_step_*"))) if self.checkpoint_dir else []
            hint = (f"{len(found)} global_step_* dir(s) there lack the COMPLETE marker; check them with verl-ckpt list"
                    if found else "check --checkpoint-dir")
            raise TrainerConfigError(f"--resume: no complete checkpoint in '{self.checkpoint_dir}' ({hint}); "
                              "pass --resume-or-start to start from step 0 instead")
        log.info("resume requested, no checkpoint found in %s: fresh start (--resume-or-start)", self.checkpoint_dir)

    def step(self) -> StepStats:
        """One PPO step (``verl.trainer.ppo_step``), then the step counter, the checkpoint and the report."""
        ctx = StepContext(step=self.global_step + 1)
        timer = StageTimer(self.clock, enter=self.hooks.enter_stage, waits=self.ctx.waits)
        started = self.clock.monotonic()
        outcome = ppo_step(self.parts, ctx, timer)
        self.global_step = ctx.step
        with timer("checkpoint"):
            stall = self._maybe_checkpoint(ctx.step)
        ctx.step_seconds = self.clock.monotonic() - started
        self.hooks.fire(STEP_END, ctx)
        stats = step_stats(outcome, ctx, timer.seconds, stall, self.ctx)
        self.telemetry.observe_ranks(ctx.step_seconds, timer.seconds, timer.waiting)  # a collective: every rank
        scored = outcome.scored
        self.telemetry.observe(stats, scored.valid, scored.taken_at, scored.evicted)
        return stats

    def _maybe_checkpoint(self, step: int) -> float:
        """Save on ``checkpoint.interval``, else snapshot to the in-memory tier when the checkpointer has one
        (``checkpoint.memory_interval``); seconds the step was blocked (nothing after a stop request)."""
        interval = self.config.checkpoint.interval
        if self.checkpointer is None or self.stop_reason is not None:
            return 0.0
        if interval > 0 and step % interval == 0:
            return self.checkpointer.save(self, step)
        snapshot = getattr(self.checkpointer, "snapshot", None)
        return snapshot(self, step) if snapshot is not None else 0.0

    def _closers(self) -> list[Callable[[], None]]:
        """What closing runs, in order, for each part that exists (a failed construction built fewer): the
        DDP wrappers go before the process group (``PPOModels.release_ddp`` says why)."""
        reward_path = getattr(self, "reward_path", None)
        closers = [getattr(getattr(self, "telemetry", None), "close", None),
                   getattr(getattr(self, "checkpointer", None), "close", None),
                   getattr(getattr(reward_path, "faulty", None), "close", None),
                   getattr(getattr(reward_path, "breaker", None), "close", None),
                   getattr(getattr(self, "rollout", None), "close", None),
                   getattr(getattr(self, "models", None), "release_ddp", None),
                   lambda: shutdown(self.ctx)]
        return [close for close in closers if close is not None]

    def close(self) -> None:
        for close in self._closers():
            close()

    def _close_built(self) -> None:
        """``close`` for a trainer whose construction failed: a part's own failure is logged, so that the
        construction error stays the one the caller sees."""
        for close in self._closers():
            try:
                close()
            except Exception as exc:  # noqa: BLE001 -- the construction error is the one to report
                log.warning("closing a partly built trainer: %s: %s", type(exc).__name__, exc)


class _SigtermFlag:
    """SIGTERM sets a flag the loop reads between steps (a handler that saved from inside the signal
    would interrupt a collective or the writer thread mid-file)."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = signal.signal(signal.SIGTERM, self._handle)

    @classmethod
    def install(cls) -> _SigtermFlag | None:
        if threading.current_thread() is not threading.main_thread():
            return None  # signal handlers can only be set from the main thread; the embedder owns signals
        return cls()

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.requested:
            log.warning("SIGTERM received: checkpointing after the current step, then exiting")
        self.requested = True

    def uninstall(self) -> None:
        signal.signal(signal.SIGTERM, self.previous if self.previous is not None else signal.SIG_DFL)


def _default_checkpointer(trainer: RLTrainer) -> Checkpointer | None:
    """``verl.checkpoint``'s checkpointer over ``checkpoint_dir`` (none without one)."""
    if trainer.checkpoint_dir is None:
        return None
    return make_checkpointer(trainer.config, trainer.checkpoint_dir, trainer.clock, trainer.ctx)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
