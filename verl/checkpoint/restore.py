"""Restoring a checkpoint: validate it (``verify``), then load each DCP part into the caller's models and
optimizers, the LR scheduler, this rank's RNG streams and its share of the rollout cache. The read side of
``CheckpointManager``, which calls ``load_checkpoint`` with its ranks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from . import rng
from . import rollout_cache as rcache
from .errors import CheckpointError, one_line
from .safe_load import SafeFileSystemReader, WeightsOnlyLoadPlanner
from .verify import verify


def config_hash(model_config: Mapping[str, Any] | None) -> str | None:
    if model_config is None:
        return None
    return hashlib.sha256(json.dumps(model_config, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Ranks:
    """Who is loading: this rank of ``world_size``, over ``group`` (None: no process group)."""

    rank: int
    world_size: int
    group: Any = None


@dataclass
class LoadedCheckpoint:
    step: int
    path: Path
    meta: dict[str, Any]
    lr_scheduler: Any = None
    dataset_state: Any = None
    kl_value: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    rollout_cache: pa.Table | None = None


def load_checkpoint(
    path: Path,
    ranks: Ranks,
    strategy: str | None,
    *,
    models: Mapping[str, torch.nn.Module],
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
    lr_scheduler: Any = None,
    model_config: Mapping[str, Any] | None = None,
    restore_rng: bool = True,
    allow_reshard: bool = False,
) -> LoadedCheckpoint:
    """Validate, then restore the checkpoint at ``path`` into the given objects (``strategy``: this run's,
    None = not checked); raises ``CheckpointError`` on any defect."""
    meta = verify(path)
    name = path.name
    saved_strategy = meta.get("strategy") or "ddp"  # checkpoints from before FSDP are DDP ones
    if strategy is not None and saved_strategy != strategy:
        raise CheckpointError(
            f"strategy mismatch: {name} was written by a {saved_strategy} run, this run uses {strategy} "
            f"(set actor.strategy/critic.strategy back to {saved_strategy}; converting between them is not supported)")
    saved_ws = meta["world_size"]
    if saved_ws != ranks.world_size and not allow_reshard:
        raise CheckpointError(
            f"world size mismatch: {name} was saved by {saved_ws} ranks, this run has {ranks.world_size} "
            "(relaunch with the same number of ranks; actor.strategy=fsdp runs reshard, "
            "CheckpointManager.load(allow_reshard=True) does for any)"
        )
    want = config_hash(model_config)
    if want is not None and meta.get("model_config_hash") not in (None, want):
        raise CheckpointError(f"model config hash mismatch: {name} was saved for a different model configuration")
    parts = meta["parts"]
    for pname in list(models) + [f"optim/{o}" for o in optimizers or {}]:
        if pname not in parts:
            raise CheckpointError(f"meta mismatch: {name} has no part '{pname}' (parts: {sorted(parts)})")
    for mname, model in models.items():
        target = get_model_state_dict(model)
        _dcp_load(target, path / mname, f"{name}/{mname}", ranks)
        set_model_state_dict(model, target)
    for oname, opt in (optimizers or {}).items():
        target = get_optimizer_state_dict(models[oname], opt)
        _dcp_load(target, path / "optim" / oname, f"{name}/optim/{oname}", ranks)
        set_optimizer_state_dict(models[oname], opt, target)
    if lr_scheduler is not None and meta.get("lr_scheduler") is not None and hasattr(lr_scheduler, "load_state_dict"):
        try:
            lr_scheduler.load_state_dict(meta["lr_scheduler"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"malformed {name}/meta.json: lr_scheduler ({one_line(exc)[:120]})") from None
    if restore_rng and saved_ws == ranks.world_size:
        try:
            rng.restore(meta["rng"][ranks.rank])
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:  # verify() checked the shape
            raise CheckpointError(f"malformed {name}/meta.json: rng[{ranks.rank}] cannot be restored "
                                  f"({one_line(exc)[:120]})") from None
    return LoadedCheckpoint(
        step=meta["global_step"], path=path, meta=meta, lr_scheduler=meta.get("lr_scheduler"),
        dataset_state=meta.get("dataset"), kl_value=meta.get("kl_controller", {}).get("value"),
        extra=meta.get("extra") or {}, rollout_cache=_load_rollout(path, parts.get("rollout_cache"), saved_ws, ranks),
    )


def _dcp_load(target: Any, part_dir: Path, what: str, ranks: Ranks) -> None:
    reader = SafeFileSystemReader(part_dir)
    planner = WeightsOnlyLoadPlanner()
    reader.read_metadata()  # a refused file stops here with its own one line, before DCP wraps it
    try:
        if ranks.group is not None:
            dcp.load(target, storage_reader=reader, planner=planner, process_group=ranks.group)
        else:
            dcp.load(target, storage_reader=reader, planner=planner, no_dist=True)
    except (Exception, CheckpointException) as exc:  # DCP raises many kinds; the operator needs one line
        raise CheckpointError(f"cannot load {what}: {one_line(exc)}") from None


def _load_rollout(path: Path, info: dict[str, Any] | None, saved_ws: int, ranks: Ranks) -> pa.Table | None:
    if not info:
        return None
    shards = info.get("shards", [])
    if saved_ws == ranks.world_size:
        return rcache.read(path / "rollout_cache", [s["file"] for s in shards if s["rank"] == ranks.rank])
    table = rcache.read(path / "rollout_cache", [s["file"] for s in shards])
    return table.take(list(range(ranks.rank, table.num_rows, ranks.world_size)))  # resharded round-robin
