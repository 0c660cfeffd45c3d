"""The in-memory checkpoint tier: a snapshot of the whole training state every step or few, in tmpfs.

The in-memory tier of ByteCheckpoint/Gemini: RAM that outlives the trainer process, so a SIGKILLed
trainer's successor (a hot standby, or a plain restart) resumes from the last step instead of the last disk
checkpoint. Pipeline of one snapshot::

    snapshot() [caller blocks]  stage parameters and optimizer state into reused CPU buffers, trainer
                                state and RNG as JSON
    writer     [background]     one safetensors file per part -> meta.json (sha256 of every file) -> COMPLETE
                                -> rotate (``keep_last``)

Why not the DCP path of ``CheckpointManager``: DCP writes each tensor through its own ``torch.save`` call
with planning in Python; for ppo_tiny that is 0.33 s of GIL-holding work per save, more than a step, and
saving every step halved the training rate. A safetensors file per part is written in native code (a few
ms here) and is as safe to load: no pickle, so a crafted snapshot cannot run code. Single process only:
a multi-rank snapshot would need a collective to agree on the step, which the disk tier already does.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from . import layout, rng
from .errors import CheckpointError, one_line
from .staging import StagingBuffers

log = logging.getLogger(__name__)
FORMAT = "verl-ops-memory-snapshot"
VERSION = 1
PART_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$")  # actor, optim.critic: never a path


def _encode(obj: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON skeleton of a nested state dict; its tensors go to ``tensors`` under path keys. Dict keys
    keep their type (optimizer state may be keyed by ints), so dicts are lists of pairs."""
    if isinstance(obj, torch.Tensor):
        tensors[key] = obj
        return {"t": key}
    if isinstance(obj, Mapping):
        return {"d": [[k, _encode(v, f"{key}/{k}", tensors)] for k, v in obj.items()]}
    if isinstance(obj, list | tuple):
        return {"l" if isinstance(obj, list) else "u": [_encode(v, f"{key}/{i}", tensors) for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, bool | int | float | str):
        return {"v": obj}
    raise TypeError(f"cannot snapshot a {type(obj).__name__} at {key}")


def _decode(node: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    if not isinstance(node, dict) or len(node) != 1:
        raise CheckpointError(f"malformed snapshot skeleton node {str(node)[:80]!r}")
    (kind, body), = node.items()
    if kind == "t" and isinstance(body, str) and body in tensors:
        return tensors[body]
    if kind == "d" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {k: _decode(v, tensors) for k, v in body}
    if kind in ("l", "u") and isinstance(body, list):
        items = [_decode(v, tensors) for v in body]
        return items if kind == "l" else tuple(items)
    if kind == "v" and (body is None or isinstance(body, bool | int | float | str)):
        return body
    raise CheckpointError(f"malformed snapshot skeleton node {str(node)[:80]!r}")


@dataclass
class Snapshot:
    step: int
    path: Path
    trainer_state: dict[str, Any]


class MemorySnapshotter:
    """Snapshots into ``root`` (a tmpfs directory) in the background, at most one in flight."""

    def __init__(self, root: str | Path, keep_last: int = 2) -> None:
        if keep_last < 1:
            raise ValueError(f"checkpoint.memory_keep_last must be >= 1, got {keep_last}")
        self.root, self.keep_last = Path(root), keep_last
        self._buffers = StagingBuffers()
        self._idle = threading.Event()
        self._idle.set()
        self.failures = 0

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def latest_complete(self) -> Path | None:
        return layout.latest_complete(self.root)

    def snapshot(self, step: int, models: Mapping[str, torch.nn.Module], optimizers: Mapping[str, torch.optim.Optimizer],
                 trainer_state: Mapping[str, Any], model_config_hash: str | None) -> bool:
        """Stage ``step`` and write it in the background; False (nothing done) while the previous one
        is still being written."""
        if self.busy:
            return False
        parts: dict[str, Any] = {}
        for name, model in models.items():
            # plain state dicts: DCP's get_*_state_dict resolve fully qualified names on every call (10 ms
            # per step here), which a single process does not need
            parts[name] = self._buffers.stage(model.state_dict(), name)
            if name in optimizers:
                parts[f"optim.{name}"] = self._buffers.stage(optimizers[name].state_dict(), f"optim.{name}")
        meta = {"format": FORMAT, "version": VERSION, "global_step": int(step), "rng": rng.capture(),
                "model_config_hash": model_config_hash,
                # a JSON round trip snapshots the trainer's dicts, which the next step mutates
                "trainer": json.loads(json.dumps(dict(trainer_state)))}
        self._idle.clear()
        threading.Thread(target=self._write, args=(step, parts, meta), name="memory-snapshot", daemon=True).start()
        return True

    def _write(self, step: int, parts: dict[str, Any], meta: dict[str, Any]) -> None:
        path = layout.step_dir(self.root, step)
        try:
            if path.exists():
                shutil.rmtree(path)
            path.mkdir(parents=True)
            skeletons = {}
            for name, state in parts.items():
                tensors: dict[str, torch.Tensor] = {}
                skeletons[name] = _encode(state, name, tensors)
                save_file(tensors, str(path / f"{name}.safetensors"))
            meta["parts"] = skeletons
            meta["manifest"] = layout.manifest(path)
            layout.atomic_write_json(path / layout.META, meta)
            layout.atomic_write_json(path / layout.MARKER, {"global_step": step})
            layout.rotate(self.root, self.keep_last)
        except (OSError, TypeError, ValueError, SafetensorError) as exc:  # RAM full, tmpfs gone: disk still has it
            self.failures += 1
            log.warning("in-memory snapshot of step %d failed (%d so far): %s", step, self.failures, one_line(exc))
        finally:
            self._idle.set()

    def wait(self) -> None:
        self._idle.wait()

    def load(self, models: Mapping[str, torch.nn.Module], optimizers: Mapping[str, torch.optim.Optimizer],
             model_config_hash: str | None) -> Snapshot | None:
        """Restore the newest complete snapshot (parameters, optimizer state, RNG); its trainer state is
        returned for ``trainer.load_state_dict``. ``CheckpointError`` on any defect, before anything moved."""
        path = self.latest_complete()
        if path is None:
            return None
        try:
            meta = json.loads((path / layout.META).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise CheckpointError(f"{path.name}/meta.json unreadable ({one_line(exc)[:120]})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise CheckpointError(f"{path.name}: not a version-{VERSION} memory snapshot")
        if model_config_hash is not None and meta.get("model_config_hash") not in (None, model_config_hash):
            raise CheckpointError(f"model config hash mismatch: {path.name} was saved for another model configuration")
        manifest, parts, step = meta.get("manifest"), meta.get("parts"), meta.get("global_step")
        if not isinstance(manifest, dict) or not isinstance(parts, dict) or not isinstance(step, int):
            raise CheckpointError(f"{path.name}/meta.json has no manifest, parts or global_step")
        if any(not isinstance(n, str) or not PART_NAME.match(n) or f"{n}.safetensors" not in manifest for n in parts):
            raise CheckpointError(f"{path.name}/meta.json: part names {sorted(map(str, parts))[:4]} are not "
                                  "plain names listed in the manifest")
        for rel, want in manifest.items():
            if not isinstance(rel, str) or "/" in rel or rel.startswith("."):
                raise CheckpointError(f"{path.name}/meta.json: manifest entry {str(rel)[:60]!r} is not a file name")
            f = path / rel
            if not f.is_file() or not isinstance(want, dict) or layout.sha256_file(f) != want.get("sha256"):
                raise CheckpointError(f"{path.name}/{rel}: missing or checksum mismatch")
        if (problem := rng.check(meta.get("rng"))) is not None:
            raise CheckpointError(f"{path.name}/meta.json rng: {problem}")
        states = {}
        for name, skeleton in parts.items():
            try:
                tensors = load_file(str(path / f"{name}.safetensors"))
            except (OSError, SafetensorError) as exc:
                raise CheckpointError(f"{path.name}/{name}.safetensors: {one_line(exc)[:120]}") from None
            states[name] = _decode(skeleton, tensors)
        for name in models:
            if name not in states or (name in optimizers and f"optim.{name}" not in states):
                raise CheckpointError(f"{path.name} has no part '{name}' (parts: {sorted(states)})")
        try:
            for name, model in models.items():
                model.load_state_dict(states[name])
                if name in optimizers:
                    optimizers[name].load_state_dict(states[f"optim.{name}"])
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{path.name}: state does not fit the model ({one_line(exc)[:160]})") from None
        rng.restore(meta["rng"])
        trainer = meta.get("trainer")
        if not isinstance(trainer, dict):
            raise CheckpointError(f"{path.name}/meta.json trainer state is not a mapping")
        return Snapshot(step, path, trainer)
