"""Helpers that forge checkpoints the way an attacker with write access would: edit a file, then
recompute every checksum (manifest, meta.json's sha in COMPLETE) so only loading itself can refuse."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.checkpoint import layout


class Payload:
    """Unpickling this calls ``os.system`` (``touch MARKER``): proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def rehash(ckpt: Path) -> None:
    """Recompute the manifest of every file, then meta.json's sha256 in COMPLETE."""
    meta = json.loads((ckpt / layout.META).read_text())
    if isinstance(meta, dict) and isinstance(meta.get("manifest"), dict):
        meta["manifest"] = layout.manifest(ckpt)
    write_meta(ckpt, meta)


def write_meta(ckpt: Path, meta: Any) -> None:
    (ckpt / layout.META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    sha = layout.sha256_file(ckpt / layout.META)
    (ckpt / layout.MARKER).write_text(json.dumps({"global_step": layout.step_of(ckpt), "meta_sha256": sha}))


def plant_payload(ckpt: Path, part: str, marker: Path) -> None:
    """Replace ``<part>/.metadata`` with a pickle that runs ``touch marker`` when loaded, re-hashed."""
    (ckpt / part / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    rehash(ckpt)


def edit_meta(ckpt: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``edit`` to meta.json (it may return a replacement document) and re-hash COMPLETE."""
    meta = json.loads((ckpt / layout.META).read_text())
    replaced = edit(meta)
    write_meta(ckpt, meta if replaced is None else replaced)
