"""``make_checkpointer``: the hook ``RLTrainer`` looks up (``verl.trainer.ppo_trainer.Checkpointer``).

Maps the trainer onto the CheckpointManager's parts: actor/critic parameters and optimizers as DCP
parts, the rollout buffer's samples as the Arrow rollout cache, the loader offset, KL controller and
LR schedulers into meta.json, the rest of ``trainer.state_dict()`` into ``extra["trainer"]``. RNG
states are captured and restored by the manager itself, per rank.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl.config import ConfigError

from .errors import CheckpointError
from .manager import CheckpointManager
from .rollout_cache import DEFAULT_SHARD_BYTES
from .shapes import short

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


class ResumeError(CheckpointError, ConfigError):
    """A checkpoint the trainer cannot resume from. Also a ``ConfigError``, so ``verl-train --resume``
    reports it like any bad input: one line, exit code 2, no traceback."""


class TrainerCheckpointer:
    def __init__(self, config: Any, checkpoint_dir: str | Path, clock: Any, ctx: Any = None) -> None:
        ck = config.checkpoint
        self.config = config
        self.manager = CheckpointManager(
            checkpoint_dir, keep_last=ck.keep_last, async_save=ck.async_save,
            rollout_cache_shard_bytes=getattr(ck, "rollout_cache_shard_bytes", DEFAULT_SHARD_BYTES), clock=clock,
        )
        self._metrics_bound = False

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
        state = dict(trainer.state_dict())
        state.pop("rng", None)
        buffer = dict(state.pop("buffer", {}) or {})
        items = buffer.pop("items", [])
        models, optimizers = self._objects(trainer)
        result = self.manager.save(
            step, models=models, optimizers=optimizers,
            lr_scheduler={"actor": state.get("actor_lr_scheduler"), "critic": state.get("critic_lr_scheduler")},
            dataset_state=state.get("dataloader"), kl_value=(state.get("kl_ctrl") or {}).get("value"),
            rollout_cache=_rows_from_buffer(items), extra={"trainer": state, "buffer": buffer},
            model_config=_model_config(self.config),
        )
        if final:
            self.manager.wait()
        return result.stall_s if result is not None else 0.0

    def resume(self, trainer: Any) -> int | None:
        """Load the newest complete checkpoint into ``trainer``; raises ``CheckpointError`` on any defect."""
        from verl.utils.seeding import rng_state

        models, optimizers = self._objects(trainer)
        try:
            loaded = self.manager.load(models=models, optimizers=optimizers, model_config=_model_config(self.config))
        except CheckpointError as exc:
            raise ResumeError(f"cannot resume from {self.manager.root}: {exc}") from None
        if loaded is None:
            return None
        where = f"cannot resume from {self.manager.root}: {loaded.path.name}/"
        if not isinstance(loaded.extra.get("trainer"), dict) or not isinstance(loaded.extra.get("buffer", {}), dict):
            raise ResumeError(f"{where}meta.json extra.trainer/extra.buffer are not mappings")
        state = dict(loaded.extra["trainer"])
        rows = loaded.rollout_cache.to_pylist() if loaded.rollout_cache is not None else []
        try:
            state["buffer"] = {**loaded.extra.get("buffer", {}), "items": _buffer_from_rows(rows)}
        except (KeyError, TypeError, ValueError) as exc:
            raise ResumeError(f"{where}rollout_cache rows are malformed ({type(exc).__name__}: {short(str(exc))})") from None
        state["rng"] = rng_state()  # the manager already restored this rank's streams
        try:
            trainer.load_state_dict(state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
            # extra is the trainer's own opaque state: its shape is checked by the code that reads it
            raise ResumeError(f"{where}meta.json extra.trainer is malformed "
                              f"({type(exc).__name__}: {short(str(exc))})") from None
        return loaded.step

    def close(self) -> None:
        self.manager.close()


def make_checkpointer(config: Any, checkpoint_dir: str | Path, clock: Any, ctx: Any = None) -> TrainerCheckpointer:
    return TrainerCheckpointer(config, checkpoint_dir, clock, ctx)
