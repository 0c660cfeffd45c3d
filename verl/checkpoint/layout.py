"""On-disk layout of a checkpoint directory and the file primitives that make it crash-safe.

::

    DIR/global_step_<N>/
        actor/  critic/          DCP shards of model parameters (one ``__<rank>_0.distcp`` per rank)
        optim/actor/ ...         DCP shards of optimizer state, kept apart from the parameters
        rollout_cache/           Arrow IPC files ``rank<R>-<K>.arrow``, sharded by time
        <part>/writer-rank<R>.json  per part and rank: run id, step, sha256 of that rank's files as written
        meta.json                versions, step, run id, RNG per rank, offsets, manifest (sha256 of every file)
        COMPLETE                 written last, atomically: only a directory holding it is a checkpoint
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

STEP_PREFIX = "global_step_"
MARKER = "COMPLETE"
META = "meta.json"
log = logging.getLogger(__name__)
WRITER_RE = re.compile(r"^writer-rank(\d+)\.json$")
_STEP_RE = re.compile(rf"^{STEP_PREFIX}(\d+)$")


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{int(step)}"


def writer_file(rank: int) -> str:
    return f"writer-rank{int(rank)}.json"


def step_of(path: str | Path) -> int | None:
    m = _STEP_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def is_complete(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def list_steps(root: str | Path) -> list[tuple[int, Path]]:
    """Every ``global_step_<N>`` directory under ``root``, complete or not, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(step_of(p), p) for p in root.iterdir() if p.is_dir()]
    return sorted((s, p) for s, p in found if s is not None)


def latest_complete(root: str | Path) -> Path | None:
    """The newest checkpoint whose completion marker exists (validity is checked by ``verify``)."""
    complete = [p for _, p in list_steps(root) if is_complete(p)]
    return complete[-1] if complete else None


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + fsync(dir): after a crash the file is either absent or whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a stale temporary or a planted link: removed, never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def manifest(ckpt: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every data file, keyed by path relative to the checkpoint directory."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(ckpt.rglob("*")):
        rel = p.relative_to(ckpt).as_posix()
        if not p.is_file() or rel in (META, MARKER) or p.name.startswith(".") and p.name.endswith(".tmp"):
            continue
        out[rel] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    return out


def rotate(root: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints, plus debris older than the newest
    complete one. Only what is proven superseded goes: a complete checkpoint older than ``keep_last``
    newer complete ones, or debris of a killed save (no ``meta.json``: the writer puts it down just
    before ``COMPLETE``). A directory with ``meta.json`` but no marker is kept (its marker may have been
    removed by hand, or a resume pointed elsewhere), and so is anything newer than the newest complete
    checkpoint (a save in flight). The newest complete checkpoint is never deleted."""
    if keep_last < 1:
        raise ValueError(f"checkpoint.keep_last must be >= 1, got {keep_last}")
    entries = list_steps(root)
    complete = [s for s, p in entries if is_complete(p)]
    if not complete:
        return []
    keep = set(complete[-keep_last:])
    newest = complete[-1]
    removed = []
    for s, p in entries:
        if s in keep or s > newest:
            continue
        if is_complete(p):
            # the marker goes first so a crash mid-delete leaves debris, never a "complete" husk
            (p / MARKER).unlink(missing_ok=True)
        elif (p / META).exists():
            log.warning("keeping %s: it has %s but no %s, so it is not provably debris; delete it by hand "
                        "if it is not needed", p, META, MARKER)
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed
