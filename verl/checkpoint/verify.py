"""Validation of one checkpoint directory before anything is loaded from it.

Order matters for the operator: the most specific explanation wins (a version mismatch says more
than the checksum mismatch the same edit also causes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from . import layout
from .errors import CheckpointError
from .rollout_cache import check_version

FORMAT_VERSION = 1
DCP_PART_VERSION = "dcp-1"


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing {what}: {path}") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"unreadable {what} {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None


def verify(ckpt: str | Path, check_checksums: bool = True) -> dict[str, Any]:
    """Return the parsed meta.json of a valid checkpoint, or raise a one-line ``CheckpointError``."""
    ckpt = Path(ckpt)
    name = ckpt.name
    if not ckpt.is_dir():
        raise CheckpointError(f"checkpoint directory {ckpt} does not exist")
    if not layout.is_complete(ckpt):
        raise CheckpointError(
            f"incomplete checkpoint {name}: completion marker {layout.MARKER} missing (the save was interrupted)"
        )
    marker = _read_json(ckpt / layout.MARKER, "completion marker")
    meta = _read_json(ckpt / layout.META, "meta.json")
    if not isinstance(meta, dict):
        raise CheckpointError(f"meta mismatch: {name}/meta.json is not a JSON object")

    got = meta.get("format_version")
    if got != FORMAT_VERSION:
        raise CheckpointError(f"Checkpoint format version mismatch in {name}/meta.json: expected {FORMAT_VERSION}, got {got}")
    parts = meta.get("parts")
    if not isinstance(parts, dict):
        raise CheckpointError(f"meta mismatch: {name}/meta.json has no 'parts'")
    for part, info in sorted(parts.items()):
        if part == "rollout_cache":
            check_version(info.get("version"), f"{name}/meta.json")
        elif info.get("version") != DCP_PART_VERSION:
            raise CheckpointError(
                f"{part} shard format version mismatch in {name}/meta.json: "
                f"expected {DCP_PART_VERSION}, got {info.get('version')}"
            )

    meta_sha = hashlib.sha256((ckpt / layout.META).read_bytes()).hexdigest()
    if marker.get("meta_sha256") != meta_sha:
        raise CheckpointError(f"checksum mismatch in {name}/meta.json (does not match {layout.MARKER})")
    step = layout.step_of(ckpt)
    if meta.get("global_step") != step:
        raise CheckpointError(f"meta mismatch: {name}/meta.json says global_step {meta.get('global_step')}")
    world = meta.get("world_size")
    if not isinstance(world, int) or world < 1 or len(meta.get("rng", [])) != world:
        raise CheckpointError(f"meta mismatch: {name}/meta.json has world_size {world} but RNG states for "
                              f"{len(meta.get('rng', []))} ranks")

    files: dict[str, dict[str, Any]] = meta.get("manifest", {})
    for part, info in sorted(parts.items()):
        if part != "rollout_cache" and f"{info['path']}/.metadata" not in files:
            raise CheckpointError(f"meta mismatch: manifest of {name} lacks {info['path']}/.metadata")
        if part == "rollout_cache":
            for shard in info.get("shards", []):
                if f"rollout_cache/{shard['file']}" not in files:
                    raise CheckpointError(f"meta mismatch: manifest of {name} lacks rollout_cache/{shard['file']}")
    for rel, entry in sorted(files.items()):
        path = ckpt / rel
        if not path.is_file():
            raise CheckpointError(f"missing file {name}/{rel}")
        if path.stat().st_size != entry["bytes"] or (
            check_checksums and layout.sha256_file(path) != entry["sha256"]
        ):
            raise CheckpointError(f"checksum mismatch in {name}/{rel}")
    return meta
