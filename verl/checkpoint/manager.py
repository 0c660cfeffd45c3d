"""CheckpointManager: sharded DCP saves that block training only while state is staged.

Pipeline of one save::

    save()  [caller blocks]   wait for the previous save -> stage params/optimizer into reused CPU
                              buffers -> capture RNG, offsets, extra
    writer  [background]      rollout cache (Arrow) -> dcp.save per part -> per rank and part a
                              writer-rank<R>.json (run id, step, sha256 of its files) -> gather per-rank
                              RNG and shard lists -> rank 0: manifest (sha256) -> meta.json -> COMPLETE
                              -> rotate
    a failed save             every rank stops at the same point, rank 0 removes the step's directory
                              (partial shards included), one warning; the next interval saves again

``load`` validates and restores through ``verl.checkpoint.restore`` (the read side).
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
)

from verl.utils.clock import Clock, SystemClock

from . import layout, rng
from . import rollout_cache as rcache
from .errors import CheckpointError, one_line
from .restore import LoadedCheckpoint, Ranks, config_hash, load_checkpoint
from .staging import StagingBuffers
from .verify import DCP_PART_VERSION, FORMAT_VERSION

log = logging.getLogger(__name__)


def _state_of(obj: Any) -> Any:
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


@dataclass
class SaveResult:
    step: int
    path: Path
    stall_s: float  # time the caller was blocked
    write_s: float = 0.0  # background time from staging done to COMPLETE
    error: str | None = None


@dataclass
class _Staged:
    step: int
    path: Path
    parts: dict[str, Any]  # part path ("actor", "optim/actor") -> staged state dict
    meta: dict[str, Any]
    local_rng: dict[str, Any]
    rollout: pa.Table | None


LOW_SPACE_BYTES = 16 * 1024**2


def _run_all(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        hook()


def _disk_note(path: Path) -> str:
    """A full disk surfaces from torch's writer as e.g. "unexpected pos 704 vs 598", not ENOSPC: name it."""
    try:
        free = shutil.disk_usage(path if path.exists() else path.parent).free
    except OSError:
        return ""
    return f" (disk full: {free} bytes free under {path.parent})" if free < LOW_SPACE_BYTES else ""


class CheckpointManager:
    """Saves and loads ``DIR/global_step_<N>/`` checkpoints (see ``verl/checkpoint/README.md``).

    ``models`` / ``optimizers`` are keyed by part name (``actor``, ``critic``); an optimizer is saved
    under ``optim/<name>`` beside the model of the same name. Works without ``init_process_group``
    (world size 1) and, when a process group exists, on a dedicated gloo group so background writes
    never share a communicator with training collectives.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        keep_last: int = 3,
        async_save: bool = True,
        rollout_cache_shard_bytes: int = rcache.DEFAULT_SHARD_BYTES,
        clock: Clock | None = None,
        process_group: Any = None,
        stall_gauge: Any = None,
        last_success_gauge: Any = None,
        failures_counter: Any = None,
        on_saved: Callable[[SaveResult], None] | None = None,
    ) -> None:
        if keep_last < 1:
            raise ValueError(f"checkpoint.keep_last must be >= 1, got {keep_last}")
        if rollout_cache_shard_bytes < 1:
            raise ValueError(f"checkpoint.rollout_cache_shard_bytes must be >= 1, got {rollout_cache_shard_bytes}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.async_save = async_save
        self.shard_bytes = rollout_cache_shard_bytes
        self.clock = clock or SystemClock()
        self._stall_gauge, self._last_gauge, self._failures = stall_gauge, last_success_gauge, failures_counter
        self._on_saved = on_saved
        self._distributed = dist.is_available() and dist.is_initialized()
        if self._distributed:
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self._pg = process_group or dist.new_group(backend="gloo")
        else:
            self.rank, self.world_size, self._pg = 0, 1, None
        self.run_id: str = self.gather(uuid.uuid4().hex)[0]
        """This run's id (rank 0's, shared): in meta.json and in every part's writer files, so a checkpoint
        made of parts written by two runs never verifies."""
        self.strategy: str | None = None
        """Recorded in meta.json ("ddp", "fsdp"): a resume under another strategy is refused."""
        self._failed_streak = 0
        self.writing_step: int | None = None
        """The step the background writer is saving (for ``before_commit`` hooks), None when idle."""
        self._buffers = StagingBuffers()
        # One long-lived writer thread fed through a queue: starting a thread per save made the caller
        # wait for the new thread to be scheduled (24 ms of a 90 ms stall on a busy host).
        self._jobs: queue.Queue[_Staged | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._writer: threading.Thread | None = None
        self._result: SaveResult | None = None
        self.last_result: SaveResult | None = None
        self.before_commit: list[Callable[[], None]] = []
        """Run by the writer after a save's data files and before its meta.json/COMPLETE (the fault
        plan's ``checkpoint_write_delay_s`` widens that window so a kill can land mid-save)."""

    def bind_metrics(self, *, stall_gauge: Any = None, last_success_gauge: Any = None, failures_counter: Any = None) -> None:
        """Attach metrics after construction (the trainer builds its registry after its checkpointer)."""
        if stall_gauge is not None:
            self._stall_gauge = stall_gauge
        if last_success_gauge is not None:
            self._last_gauge = last_success_gauge
        if failures_counter is not None:
            self._failures = failures_counter

    # ---------------------------------------------------------------- save
    def save(
        self,
        step: int,
        *,
        models: Mapping[str, torch.nn.Module],
        optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
        lr_scheduler: Any = None,
        dataset_state: Any = None,
        kl_value: float | None = None,
        rollout_cache: pa.Table | list[dict[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
        model_config: Mapping[str, Any] | None = None,
    ) -> SaveResult | None:
        """Checkpoint ``step``. Returns after staging (async) or after COMPLETE (sync); ``None`` when a
        complete checkpoint of this step already exists. Every rank must call it."""
        t0 = time.perf_counter()
        self.wait(raise_on_error=False)  # at most one save in flight
        path = layout.step_dir(self.root, step)
        # rank 0's view for all: it writes COMPLETE, and another rank's writer can be done before that
        # (the final save of a step that was also an interval step hung when ranks decided differently)
        if self.gather(layout.is_complete(path))[0]:
            return None
        if self.rank == 0 and path.exists():
            shutil.rmtree(path)  # debris of a save that was killed before its marker
        self._barrier()
        parts: dict[str, Any] = {}
        for name, model in models.items():
            parts[name] = self._buffers.stage(get_model_state_dict(model), name)
        for name, opt in (optimizers or {}).items():
            if name not in models:
                raise ValueError(f"optimizer '{name}' has no model of the same name in models={sorted(models)}")
            parts[f"optim/{name}"] = self._buffers.stage(get_optimizer_state_dict(models[name], opt), f"optim/{name}")
        meta = {
            "format_version": FORMAT_VERSION,
            "global_step": int(step),
            "created_at": self.clock.now(),
            "world_size": self.world_size,
            "run_id": self.run_id,
            "strategy": self.strategy,
            "lr_scheduler": _state_of(lr_scheduler),
            "dataset": dataset_state,
            "kl_controller": {"value": kl_value},
            "model_config_hash": config_hash(model_config),
            "extra": dict(extra or {}),
            "parts": {
                p: {"version": DCP_PART_VERSION, "path": p, "role": "optimizer" if p.startswith("optim/") else "model"}
                for p in parts
            },
        }
        try:
            # a JSON round trip both validates and snapshots: the trainer may mutate its dicts while
            # the background writer is still running
            meta = json.loads(json.dumps(meta))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint meta is not JSON-serialisable ({exc}); pass plain dicts/lists/numbers") from None
        staged = _Staged(
            step, path, parts, meta, rng.capture(),
            rcache.as_table(rollout_cache) if rollout_cache is not None else None,
        )
        stall = time.perf_counter() - t0
        self._result = SaveResult(step, path, stall)
        if self._stall_gauge is not None:
            self._stall_gauge.set(stall)
        if self.async_save:
            if self._writer is None:
                self._writer = threading.Thread(target=self._writer_loop, name="checkpoint-writer", daemon=True)
                self._writer.start()
            self._idle.clear()
            self._jobs.put(staged)
            return self._result
        self._write(staged)
        self._result.stall_s = time.perf_counter() - t0
        if self._stall_gauge is not None:
            self._stall_gauge.set(self._result.stall_s)
        return self.wait()

    def wait(self, raise_on_error: bool = True, timeout: float | None = None) -> SaveResult | None:
        """Block until the save in flight (if any) is complete; return its result. With ``timeout``:
        ``None`` when it is still being written after that many seconds (the result stays pending)."""
        if not self._idle.wait(timeout):
            return None
        result, self._result = self._result, None
        if result is not None:
            self.last_result = result
            if result.error and raise_on_error:
                raise CheckpointError(f"checkpoint save of global_step_{result.step} failed: {result.error}")
        return result

    def _writer_loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._write(job)
            finally:
                self._idle.set()

    def _write(self, s: _Staged) -> None:
        t0 = time.perf_counter()
        res = self._result
        assert res is not None
        self.writing_step = s.step
        try:
            self._write_parts(s)
            if self._last_gauge is not None:
                self._last_gauge.set(self.clock.now())
            self._failed_streak = 0
        except (Exception, CheckpointException) as exc:  # a failed save is counted and reported, training goes on
            res.error = one_line(exc) + _disk_note(s.path)
            self._discard(s.path, res.error)
        self.writing_step = None
        res.write_s = time.perf_counter() - t0
        if res.error is None:
            log.info("checkpoint global_step_%d complete: blocked the step %.3fs, written in %.2fs",
                     s.step, res.stall_s, res.write_s)
        if self._on_saved is not None:
            self._on_saved(res)

    def _write_parts(self, s: _Staged) -> None:
        shards: list[dict[str, Any]] = self._together(partial(self._write_rollout, s)) or []
        for part, state in s.parts.items():
            self._dcp_save(state, s.path / part)  # dcp.save reports a failure on every rank itself
            self._together(partial(self._write_writer_file, s, s.path / part, None))
        self._together(partial(_run_all, self.before_commit))
        gathered = self.gather({"rng": s.local_rng, "shards": shards, "has_cache": s.rollout is not None})
        if self.rank == 0:
            meta = s.meta
            meta["rng"] = [g["rng"] for g in gathered]
            if any(g["has_cache"] for g in gathered):
                meta["parts"]["rollout_cache"] = {
                    "version": rcache.ROLLOUT_CACHE_VERSION,
                    "path": "rollout_cache",
                    "shards": [sh for g in gathered for sh in g["shards"]],
                }
            meta["manifest"] = layout.manifest(s.path)
            layout.atomic_write_json(s.path / layout.META, meta)
            meta_sha = layout.sha256_file(s.path / layout.META)
            layout.atomic_write_json(s.path / layout.MARKER, {"global_step": s.step, "meta_sha256": meta_sha})
            layout.rotate(self.root, self.keep_last)

    def _write_writer_file(self, s: _Staged, part_dir: Path, files: list[str] | None) -> None:
        """``<part>/writer-rank<R>.json``: which run wrote this rank's files of the part, at which step, and
        their sha256 as written. ``verify`` checks them against meta.json and the manifest."""
        rel_part = part_dir.relative_to(s.path).as_posix()
        if files is None:  # a DCP part: this rank's data file(s) are named __<rank>_<k>.distcp, rank 0 adds .metadata
            mine = sorted(part_dir.glob(f"__{self.rank}_*.distcp")) + ([part_dir / ".metadata"] if self.rank == 0 else [])
            files = [f"{rel_part}/{p.name}" for p in mine]
        part_dir.mkdir(parents=True, exist_ok=True)
        doc = {"run_id": self.run_id, "global_step": s.step, "rank": self.rank, "world_size": self.world_size,
               "files": {rel: layout.sha256_file(s.path / rel) for rel in files}}
        layout.atomic_write_json(part_dir / layout.writer_file(self.rank), doc)

    def _write_rollout(self, s: _Staged) -> list[dict[str, Any]]:
        if s.rollout is None:
            return []
        written = rcache.write(s.path / "rollout_cache", s.rollout, self.rank, self.shard_bytes)
        self._write_writer_file(s, s.path / "rollout_cache", [f"rollout_cache/{sh.file}" for sh in written])
        return [{**asdict(sh), "rank": self.rank} for sh in written]

    def _together(self, action: Callable[[], Any]) -> Any:
        """Run a rank-local write; a failure on any rank raises on every rank, before the next collective,
        so no rank waits in dcp.save or a gather for one that gave up."""
        result, error = None, None
        try:
            result = action()
        except Exception as exc:
            error = one_line(exc)
        errors = [e for e in self.gather(error) if e]
        if errors:
            raise CheckpointError(errors[0])
        return result

    def _discard(self, path: Path, error: str) -> None:
        """A failed save leaves nothing behind: its partial files would fill the disk for every later save
        too. One warning per failure streak (a full disk fails every interval until space is freed)."""
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        self._failed_streak += 1
        if self._failed_streak == 1:
            log.warning("checkpoint %s failed, its partial files removed; training goes on and the next "
                        "interval saves again: %s", path.name, error)
        else:
            log.debug("checkpoint %s failed again (%d in a row): %s", path.name, self._failed_streak, error)
        if self._failures is not None:
            self._failures.inc()

    def _dcp_save(self, state: Any, path: Path) -> None:
        writer = FileSystemWriter(str(path), sync_files=True)
        if self._distributed:
            dcp.save(state, storage_writer=writer, process_group=self._pg)
        else:
            dcp.save(state, storage_writer=writer, no_dist=True)

    def gather(self, obj: Any) -> list[Any]:
        if not self._distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self._pg)
        return out

    def _barrier(self) -> None:
        if self._distributed:
            dist.barrier(group=self._pg)

    # ---------------------------------------------------------------- load
    def latest_complete(self) -> Path | None:
        return layout.latest_complete(self.root)

    def load(self, ckpt: str | Path | None = None, **options: Any) -> LoadedCheckpoint | None:
        """Validate, then restore ``ckpt`` (default: the newest complete one) into the given objects
        (``options``: ``models``, ``optimizers``, … as ``verl.checkpoint.restore.load_checkpoint`` takes
        them). Returns ``None`` when there is no complete checkpoint; raises ``CheckpointError`` on any defect."""
        path = Path(ckpt) if ckpt is not None else self.latest_complete()
        if path is None:
            return None
        ranks = Ranks(self.rank, self.world_size, self._pg if self._distributed else None)
        return load_checkpoint(path, ranks, self.strategy, **options)

    @property
    def idle(self) -> bool:
        """No save in flight."""
        return self._idle.is_set()

    def close(self, wait: bool = True) -> None:
        """Finish the save in flight. Call it before the process exits: the writer is a daemon thread,
        and a save cut short leaves only an incomplete (ignored) directory. ``wait=False``: leave a save
        still in flight to die with the process (a SIGTERM grace period ran out)."""
        if not wait and not self.idle:
            return
        self.wait(raise_on_error=False)
        if self._writer is not None:
            self._jobs.put(None)
            self._writer.join()
            self._writer = None
