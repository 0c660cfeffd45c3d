"""State digest: one sha256 over actor + critic parameters, the same whatever the sharding.

Each tensor is hashed in its full (unsharded) form, in canonical order ``<part>.<name>`` sorted, with
its dtype and shape, so a 1-rank and a 2-rank run with equal weights have equal digests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.tensor import DTensor

from .errors import CheckpointError, one_line
from .safe_load import SafeFileSystemReader, WeightsOnlyLoadPlanner

MODEL_PARTS = ("actor", "critic")


def _full(t: torch.Tensor) -> torch.Tensor:
    if isinstance(t, DTensor):
        t = t.full_tensor()  # a collective: every rank must call the digest together
    return t.detach().to("cpu").contiguous()


def digest_tensors(parts: Mapping[str, Mapping[str, torch.Tensor]]) -> str:
    """``parts`` maps part name → {parameter name → tensor}."""
    h = hashlib.sha256()
    flat = {f"{part}.{name}": t for part, sd in parts.items() for name, t in sd.items()}
    for key in sorted(flat):
        t = _full(flat[key])
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def digest_models(models: Mapping[str, torch.nn.Module]) -> str:
    """Digest of live models (DDP wrappers are looked through), e.g. ``{"actor": a, "critic": c}``."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return digest_tensors({name: get_model_state_dict(m) for name, m in models.items()})


def read_full_part(part_dir: Path) -> dict[str, torch.Tensor]:
    """Load every tensor of one DCP part in full, in this process, whatever world size wrote it."""
    reader = SafeFileSystemReader(part_dir)
    meta = reader.read_metadata()  # refuses anything but DCP metadata types, with one line
    try:
        target = {
            k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
            for k, m in meta.state_dict_metadata.items()
            if isinstance(m, TensorStorageMetadata)
        }
        dcp.load(target, storage_reader=reader, planner=WeightsOnlyLoadPlanner(), no_dist=True)
    except (Exception, CheckpointException) as exc:  # DCP raises many kinds; the operator needs one line
        raise CheckpointError(f"cannot read {part_dir.parent.name}/{part_dir.name}: {one_line(exc)}") from None
    return target


def digest_checkpoint(ckpt: Path, parts: tuple[str, ...] = MODEL_PARTS) -> str:
    return digest_tensors({p: read_full_part(ckpt / p) for p in parts if (ckpt / p).is_dir()})
