"""Validation of one checkpoint directory before anything is loaded from it.

Order matters for the operator: the most specific explanation wins (a version mismatch says more
than the checksum mismatch the same edit also causes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from . import layout, rng
from .errors import CheckpointError
from .rollout_cache import check_version
from .safe_load import METADATA_FILE, load_metadata
from .shapes import COMPLETE_SCHEMA, META_SCHEMA, shape_error, short

FORMAT_VERSION = 1
DCP_PART_VERSION = "dcp-1"
MAX_JSON_BYTES = 256 * 1024**2  # meta.json of a big run with a large `extra` is a few MB


def _read_json(path: Path, what: str) -> Any:
    name = f"{path.parent.name}/{path.name}"
    try:
        if path.exists() and not path.is_file():  # a FIFO would block the read forever
            raise CheckpointError(f"unreadable {what} {name}: not a regular file")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise CheckpointError(f"unreadable {what} {name}: larger than {MAX_JSON_BYTES} bytes")
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing {what}: {path}") from None
    except RecursionError:
        raise CheckpointError(f"unreadable {what} {name}: nested too deep") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"unreadable {what} {name}: {type(exc).__name__}: {exc}".splitlines()[0][:200]) from None


def _shape(doc: Any, schema: dict[str, Any], where: str) -> None:
    problem = shape_error(doc, schema)
    if problem is not None:
        raise CheckpointError(f"malformed {where}: {problem}")


def verify(ckpt: str | Path, check_checksums: bool = True) -> dict[str, Any]:
    """Return the parsed meta.json of a valid checkpoint, or raise a one-line ``CheckpointError``.

    Also reads every DCP part's ``.metadata`` through the restricted unpickler, so a checkpoint that
    verifies is one that ``load`` and ``digest`` can open without running anything."""
    ckpt = Path(ckpt)
    name = ckpt.name
    if not ckpt.is_dir():
        raise CheckpointError(f"checkpoint directory {ckpt} does not exist")
    if not layout.is_complete(ckpt):
        raise CheckpointError(
            f"incomplete checkpoint {name}: completion marker {layout.MARKER} missing (the save was interrupted)"
        )
    marker = _read_json(ckpt / layout.MARKER, "completion marker")
    _shape(marker, COMPLETE_SCHEMA, f"{name}/{layout.MARKER}")
    meta = _read_json(ckpt / layout.META, "meta.json")
    if not isinstance(meta, dict):
        raise CheckpointError(f"meta mismatch: {name}/meta.json is not a JSON object")

    got = meta.get("format_version")
    if got != FORMAT_VERSION:
        raise CheckpointError(f"Checkpoint format version mismatch in {name}/meta.json: expected {FORMAT_VERSION}, "
                              f"got {short(got)}")
    parts = meta.get("parts")
    if not isinstance(parts, dict) or not all(isinstance(v, dict) for v in parts.values()):
        raise CheckpointError(f"meta mismatch: {name}/meta.json has no 'parts' mapping of part -> {{version, path}}")
    for part, info in sorted(parts.items()):
        if part == "rollout_cache":
            check_version(info.get("version"), f"{name}/meta.json")
        elif info.get("version") != DCP_PART_VERSION:
            raise CheckpointError(
                f"{short(part)} shard format version mismatch in {name}/meta.json: "
                f"expected {DCP_PART_VERSION}, got {short(info.get('version'))}"
            )

    meta_sha = hashlib.sha256((ckpt / layout.META).read_bytes()).hexdigest()
    if marker["meta_sha256"] != meta_sha:
        raise CheckpointError(f"checksum mismatch in {name}/meta.json (does not match {layout.MARKER})")
    _shape(meta, META_SCHEMA, f"{name}/meta.json")
    step = layout.step_of(ckpt)
    if meta["global_step"] != step or marker["global_step"] != step:
        raise CheckpointError(f"meta mismatch: {name}/meta.json says global_step {meta['global_step']}, "
                              f"{layout.MARKER} says {marker['global_step']}")
    world = meta["world_size"]
    if len(meta["rng"]) != world:
        raise CheckpointError(f"meta mismatch: {name}/meta.json has world_size {world} but RNG states for "
                              f"{len(meta['rng'])} ranks")
    for r, state in enumerate(meta["rng"]):
        problem = rng.check(state)
        if problem:
            raise CheckpointError(f"malformed {name}/meta.json: rng[{r}].{problem}")

    files: dict[str, dict[str, Any]] = meta["manifest"]
    for part, info in sorted(parts.items()):
        if info["path"] != part:
            raise CheckpointError(f"meta mismatch: {name}/meta.json part {short(part)} has path {short(info['path'])}")
        if part != "rollout_cache" and f"{part}/.metadata" not in files:
            raise CheckpointError(f"meta mismatch: manifest of {name} lacks {part}/.metadata")
        if part == "rollout_cache":
            for shard in info.get("shards", []):
                if shard["rank"] >= world:
                    raise CheckpointError(f"meta mismatch: {name} rollout shard {shard['file']} names rank "
                                          f"{shard['rank']} of a {world}-rank run")
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
    for part in sorted(parts):
        if part != "rollout_cache":
            load_metadata(ckpt / part / METADATA_FILE)
    if "run_id" in meta:  # after the unpickler's refusal: a planted payload is the more specific finding
        _check_writers(ckpt, meta)
    # else: a checkpoint from before run ids (format 1 without "run_id"): still loadable, unproven against mixing
    return meta


def _check_writers(ckpt: Path, meta: dict[str, Any]) -> None:
    """Every file of every part was written by this checkpoint's run, at its step: each rank's
    ``<part>/writer-rank<R>.json`` names meta.json's run id and step and the sha256 of the files that rank
    wrote, and together they claim every data file. Two trainers writing one directory (a relaunch while
    the old job runs) leave a mixture that fails here, whichever of them wrote meta.json."""
    name, run_id, step, world = ckpt.name, meta["run_id"], meta["global_step"], meta["world_size"]
    files: dict[str, dict[str, Any]] = meta["manifest"]
    for part in sorted(meta["parts"]):
        claimed: set[str] = set()
        for rank in range(world):
            rel = f"{part}/{layout.writer_file(rank)}"
            if rel not in files:
                raise CheckpointError(f"meta mismatch: {name}/{part} has no writer file of rank {rank} "
                                      "(written by another run, or cut short)")
            doc = _read_json(ckpt / rel, "writer file")
            if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
                raise CheckpointError(f"malformed {name}/{rel}: not a writer record")
            if doc.get("run_id") != run_id or doc.get("global_step") != step or doc.get("rank") != rank:
                raise CheckpointError(
                    f"mixed checkpoint {name}: {part} rank {rank} was written by run {short(doc.get('run_id'))} "
                    f"at step {short(doc.get('global_step'))}, meta.json is run {short(run_id)} step {step} "
                    "(two trainers on one directory?); use an older checkpoint")
            for f, sha in doc["files"].items():
                if files.get(f, {}).get("sha256") != sha:
                    raise CheckpointError(f"mixed checkpoint {name}: {short(f)} is not the file run "
                                          f"{short(run_id)} wrote (two trainers on one directory?)")
                claimed.add(f)
        for f in files:
            if f.startswith(f"{part}/") and f not in claimed and not layout.WRITER_RE.match(f.rsplit("/", 1)[-1]):
                raise CheckpointError(f"mixed checkpoint {name}: {short(f)} was written by no rank of run "
                                      f"{short(run_id)}")
