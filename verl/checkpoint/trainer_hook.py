"""``make_checkpointer``: the hook ``RLTrainer`` looks up (``verl.trainer.ppo_trainer.Checkpointer``).

Maps the trainer onto the CheckpointManager's parts: actor/critic parameters and optimizers as DCP
parts, the rollout buffer's samples as the Arrow rollout cache, the loader offset, KL controller and
LR schedulers into meta.json, the rest of ``trainer.state_dict()`` into ``extra["trainer"]``. RNG
states are captured and restored by the manager itself, per rank.

Two tiers (``checkpoint.memory_interval`` > 0): besides the disk checkpoints every ``checkpoint.interval``
steps, a snapshot every ``memory_interval`` steps into a tmpfs directory (``verl.checkpoint.memory_tier``).
The step only waits for staging; a snapshot due while the previous one is still being written is skipped.
Resume takes the newest complete checkpoint of either tier and falls back to disk when the memory tier's
is missing or defective.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from verl.config import TrainerConfigError

from .errors import CheckpointError
from .layout import step_of
from .lock import DirectoryLocked, DirLock
from .manager import CheckpointManager
from .memory_tier import MemorySnapshotter
from .restore import config_hash
from .rollout_cache import DEFAULT_SHARD_BYTES
from .shapes import short

log = logging.getLogger(__name__)
SHM = Path("/dev/shm")

_BUFFER_KEYS = ("prompt_id", "step", "prompt", "response", "prompt_ids", "response_ids", "created_at", "reward")


def _model_config(config: Any) -> dict[str, Any]:
    """What must match for parameters to be loadable: the model choice, not the hyper-parameters."""
    out: dict[str, Any] = {}
    for part in ("actor", "critic"):
        section = getattr(config, part, None)
        for key in ("model", "tiny"):
            if section is not None and hasattr(section, key):
                out[f"{part}.{key}"] = getattr(section, key)
    return out


def _rows_from_buffer(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # "timestamp" drives the time sharding; the free-form extra dict travels as JSON text because
    # Arrow cannot infer a type for an empty struct
    return [
        {**{k: item.get(k) for k in _BUFFER_KEYS}, "timestamp": float(item["created_at"]),
         "extra": json.dumps(item.get("extra") or {}, sort_keys=True)}
        for item in items
    ]


def _buffer_from_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**{k: r[k] for k in _BUFFER_KEYS}, "extra": json.loads(r["extra"])} for r in rows]


class ResumeError(CheckpointError, TrainerConfigError):
    """A checkpoint the trainer cannot resume from. Also a ``TrainerConfigError``, so ``verl-train --resume``
    reports it like any bad input: one line, exit code 2, no traceback."""


class FinalSaveFailed(CheckpointError, TrainerConfigError):
    """The run's last checkpoint could not be written (a full disk): one line, exit 2, no traceback; the
    failed save's files are already removed and the newest complete checkpoint is still good."""


def memory_tier_dir(checkpoint_dir: str | Path, configured: str | None = None) -> Path | None:
    """Where the in-memory tier of ``checkpoint_dir`` lives: ``configured``, else a directory on /dev/shm
    named after the checkpoint directory (so a successor process finds it); None without a tmpfs."""
    if configured:
        return Path(configured)
    if not (SHM.is_dir() and os.access(SHM, os.W_OK)):
        return None
    key = hashlib.sha256(str(Path(checkpoint_dir).resolve()).encode()).hexdigest()[:16]
    return SHM / f"verl-ops-{key}"


class TrainerCheckpointer:
    def __init__(self, config: Any, checkpoint_dir: str | Path, clock: Any, ctx: Any = None) -> None:
        ck = config.checkpoint
        self.config = config
        shard_bytes = getattr(ck, "rollout_cache_shard_bytes", DEFAULT_SHARD_BYTES)
        self.manager = CheckpointManager(
            checkpoint_dir, keep_last=ck.keep_last, async_save=ck.async_save,
            rollout_cache_shard_bytes=shard_bytes, clock=clock,
        )
        self.memory: MemorySnapshotter | None = None
        self.memory_interval = int(getattr(ck, "memory_interval", 0) or 0)
        where = memory_tier_dir(checkpoint_dir, getattr(ck, "memory_dir", None)) if self.memory_interval > 0 else None
        world = getattr(ctx, "world_size", 1) or 1
        if self.memory_interval > 0 and strategy_of(config) == "fsdp":
            raise TrainerConfigError("checkpoint.memory_interval needs actor.strategy=ddp and critic.strategy=ddp: the "
                              "in-memory tier stores whole tensors, not FSDP shards (set checkpoint.memory_interval=0; "
                              "disk checkpoints are sharded and async)")
        if self.memory_interval > 0 and world > 1:
            log.warning("checkpoint.memory_interval is single-process only (this run has %d ranks): disk "
                        "checkpoints only", world)
        elif self.memory_interval > 0 and where is None:
            log.warning("checkpoint.memory_interval=%d but /dev/shm is not writable: no in-memory tier "
                        "(set checkpoint.memory_dir to a tmpfs directory)", self.memory_interval)
        elif where is not None:
            self.memory = MemorySnapshotter(where, keep_last=getattr(ck, "memory_keep_last", 2))
        self._model_hash = config_hash(_model_config(config))
        self._metrics_bound = False
        self._finished = False
        self._abandoned = False
        self.manager.strategy = strategy_of(config)
        self.lock = DirLock(checkpoint_dir, self.manager.run_id)

    def acquire(self) -> None:
        """Take the directory's writer lock (rank 0 holds it for the whole job), or raise
        ``DirectoryLocked`` on every rank. ``RLTrainer.train`` calls it before resuming or saving; a
        hot-standby child only calls train() on takeover, after its predecessor died."""
        error = None
        if self.manager.rank == 0:
            try:
                self.lock.acquire()
            except DirectoryLocked as exc:
                error = str(exc)
        errors = self.manager.gather(error)
        if errors[0]:
            raise DirectoryLocked(errors[0])

    def release(self) -> None:
        """Give the directory's lock back (end of ``train()``; ``close()`` does too)."""
        self.lock.release()

    def save_on_signal(self, trainer: Any, step: int, grace_s: float) -> str:
        """SIGTERM (a preemption): finish the save in flight, then checkpoint ``step`` if that one is not
        it, all within ``grace_s``; a save still being written then is abandoned (it has no COMPLETE, so
        resume ignores it and the next save removes it). Returns what happened, for the log line."""
        deadline = time.monotonic() + grace_s
        manager = self.manager
        if manager.wait(raise_on_error=False, timeout=grace_s) is None and not manager.idle:
            self._abandoned = True
            return f"the save in flight did not finish within {grace_s:g}s: abandoned"
        self._bind_metrics(trainer)
        self._save_to(manager, trainer, step)
        result = manager.wait(raise_on_error=False, timeout=max(0.0, deadline - time.monotonic()))
        if result is None and not manager.idle:
            self._abandoned = True
            return f"checkpoint global_step_{step} not written within {grace_s:g}s: abandoned"
        self._finished = True
        if result is not None and result.error:
            return f"checkpoint global_step_{step} failed ({result.error})"
        return f"checkpoint global_step_{step} complete"

    def _bind_metrics(self, trainer: Any) -> None:
        registry = getattr(trainer, "registry", None)
        if self._metrics_bound or registry is None:
            return
        self.manager.bind_metrics(
            stall_gauge=registry["verl_checkpoint_stall_seconds"],
            last_success_gauge=registry["verl_checkpoint_last_success_timestamp_seconds"],
            failures_counter=registry["verl_checkpoint_failures_total"],
        )
        self._metrics_bound = True

    def _objects(self, trainer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({"actor": trainer.actor, "critic": trainer.critic},
                {"actor": trainer.actor_optim, "critic": trainer.critic_optim})

    def save(self, trainer: Any, step: int, final: bool = False) -> float:
        """Returns the seconds the step was blocked. ``final`` waits for COMPLETE."""
        self._bind_metrics(trainer)
        stall = self._save_to(self.manager, trainer, step)
        if final:
            try:
                self.manager.wait()
            except CheckpointError as exc:
                newest = self.manager.latest_complete()
                raise FinalSaveFailed(f"{exc} (files removed; newest complete checkpoint: "
                                      f"{newest.name if newest else 'none'})") from None
            self._finished = True
        return stall

    def snapshot(self, trainer: Any, step: int) -> float:
        """The in-memory tier's snapshot of ``step`` when due and the previous one is written; seconds
        the step was blocked (staging only)."""
        mem = self.memory
        if mem is None or step % self.memory_interval or mem.busy:
            return 0.0
        t0 = time.perf_counter()
        state = trainer.state_dict()  # RNG streams are not in it: the snapshotter captures them itself
        models, optimizers = self._objects(trainer)
        mem.snapshot(step, models, optimizers, state, self._model_hash)
        return time.perf_counter() - t0

    def _save_to(self, manager: CheckpointManager, trainer: Any, step: int) -> float:
        state = dict(trainer.state_dict())  # RNG streams are not in it: the manager captures them per rank
        buffer = dict(state.pop("buffer", {}) or {})
        items = buffer.pop("items", [])
        models, optimizers = self._objects(trainer)
        result = manager.save(
            step, models=models, optimizers=optimizers,
            lr_scheduler={"actor": state.get("actor_lr_scheduler"), "critic": state.get("critic_lr_scheduler")},
            dataset_state=state.get("dataloader"), kl_value=(state.get("kl_ctrl") or {}).get("value"),
            rollout_cache=_rows_from_buffer(items), extra={"trainer": state, "buffer": buffer},
            model_config=_model_config(self.config),
        )
        return result.stall_s if result is not None else 0.0

    def resume(self, trainer: Any) -> int | None:
        """Load the newest complete checkpoint of either tier into ``trainer``; raises ``CheckpointError``
        on any defect of a disk checkpoint. A defective memory snapshot (half-written, tampered, for
        another model) is logged and the disk tier used instead."""
        mem = self.memory.latest_complete() if self.memory is not None else None
        disk = self.manager.latest_complete()
        if mem is not None and (disk is None or (step_of(mem) or 0) > (step_of(disk) or 0)):
            try:
                return self._resume_from_memory(trainer)
            except CheckpointError as exc:
                log.warning("in-memory snapshot %s unusable, resuming from disk instead: %s", mem, exc)
        return self._resume_from_disk(trainer)

    def _resume_from_memory(self, trainer: Any) -> int | None:
        assert self.memory is not None
        models, optimizers = self._objects(trainer)
        snap = self.memory.load(models, optimizers, self._model_hash)
        if snap is None:
            return None
        _apply_trainer_state(trainer, dict(snap.trainer_state), f"{snap.path.name}/meta.json trainer state")
        log.info("resuming from the in-memory snapshot %s", snap.path)
        return snap.step

    def _resume_from_disk(self, trainer: Any) -> int | None:
        manager = self.manager
        models, optimizers = self._objects(trainer)
        try:
            # FSDP parameters and optimizer state are DTensors that DCP reshards to any world size
            loaded = manager.load(models=models, optimizers=optimizers, model_config=_model_config(self.config),
                                  allow_reshard=manager.strategy == "fsdp")
        except CheckpointError as exc:
            raise ResumeError(f"cannot resume from {manager.root}: {exc}") from None
        if loaded is None:
            return None
        where = f"cannot resume from {manager.root}: {loaded.path.name}/"
        if not isinstance(loaded.extra.get("trainer"), dict) or not isinstance(loaded.extra.get("buffer", {}), dict):
            raise ResumeError(f"{where}meta.json extra.trainer/extra.buffer are not mappings")
        state = dict(loaded.extra["trainer"])
        rows = loaded.rollout_cache.to_pylist() if loaded.rollout_cache is not None else []
        try:
            state["buffer"] = {**loaded.extra.get("buffer", {}), "items": _buffer_from_rows(rows)}
        except (KeyError, TypeError, ValueError) as exc:
            raise ResumeError(f"{where}rollout_cache rows are malformed ({type(exc).__name__}: {short(str(exc))})") from None
        _apply_trainer_state(trainer, state, f"{where}meta.json extra.trainer")
        return loaded.step

    def close(self) -> None:
        self.manager.close(wait=not self._abandoned)
        self.lock.release()
        if self.memory is not None:
            self.memory.wait()
            if self._finished:
                # the run ended with a final disk checkpoint: the snapshots would only hold RAM
                shutil.rmtree(self.memory.root, ignore_errors=True)


def strategy_of(config: Any) -> str:
    """``fsdp`` when the actor or the critic is sharded, else ``ddp`` (also for one process)."""
    parts = (getattr(config, "actor", None), getattr(config, "critic", None))
    return "fsdp" if any(getattr(p, "strategy", "ddp") == "fsdp" for p in parts) else "ddp"


def _apply_trainer_state(trainer: Any, state: dict[str, Any], what: str) -> None:
    """``trainer.load_state_dict`` (the RNG streams are restored by the manager or the snapshotter, not
    by the trainer); a state the trainer cannot take is a ``ResumeError`` naming ``what``."""
    try:
        trainer.load_state_dict(state)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        # the trainer's own opaque state: its shape is checked by the code that reads it
        raise ResumeError(f"{what} is malformed ({type(exc).__name__}: {short(str(exc))})") from None


def make_checkpointer(config: Any, checkpoint_dir: str | Path, clock: Any, ctx: Any = None) -> TrainerCheckpointer:
    return TrainerCheckpointer(config, checkpoint_dir, clock, ctx)
