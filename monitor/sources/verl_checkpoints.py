"""volcengine verl's checkpoint directory (``trainer.default_local_dir``) beside its JSONL log.

verl's layout, read from the 0.9.1 wheel (``trainer/ppo/ray_trainer.py`` and ``trainer/ppo/v1/trainer_base.py``
``_save_checkpoint``, ``utils/checkpoint/*_checkpoint_manager.py``; nothing copied):

- one ``global_step_N/`` per save, holding ``actor/`` (FSDP: ``model_world_size_W_rank_R.pt``, ``optim_*``,
  ``extra_state_*``, ``fsdp_config.json``, ``huggingface/``; Megatron's layout v2: ``model/``, ``optimizer/``,
  ``extra/`` and the ``ckpt_contents.json`` manifest rank 0 writes *last*, after async writes too),
  ``critic/`` likewise, and ``data.pt`` (the dataloader state), which the trainer writes after the actor
  and critic saves returned;
- ``latest_checkpointed_iteration.txt``, the tracker: the step number alone, written right after
  ``data.pt``, except with ``actor_rollout_ref.actor.checkpoint.async_save``: then the trainer skips it
  and only Megatron's finalize callback writes it (FSDP never does); ``trainer.resume_mode=auto`` resumes
  from the step it names (``find_latest_ckpt_path``) and trains from step 0 when it is missing or names a
  directory that does not exist -- later saves then overwrite good checkpoints.

A save is *finished* when ``data.pt`` exists and every role directory in Megatron's v2 layout holds its
manifest. The tracker should name the newest finished step within seconds of its finish marker (the
tracker is the next write); ``TRACKER_GRACE_S`` also covers a Megatron finalize's HDFS upload.

Cost is bounded: one ``scandir`` of the root per scan (entries that are symlinks are never followed), a
handful of ``lstat`` calls on the newest step directories not yet known finished, never a walk of the
shards. The scan runs in its own worker thread and the source never waits for it: a hung NFS ``stat``
leaves one thread blocked, counted once as ``checkpoint_dir_hung``, and no second scan is started
until it returns.
"""

from __future__ import annotations

import concurrent.futures
import errno
import math
import os
import re
import stat
import statistics
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from monitor.model import Sample, SourceBatch, with_node

JOB = "verl_jsonl"
TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"global_step_(\d{1,12})$")
ROLES = ("actor", "critic")
MANIFEST = "ckpt_contents.json"
V2_PARTS = ("model", "optimizer", "extra")  # Megatron's layout v2: the manifest marks the end
TRACKER_GRACE_S = 60.0    # the tracker follows the finish marker within one write (plus a finalize's upload)
LOG_LAG_STEPS = 3         # 0.6-0.7's file logger flushes every 8 KB: the log may trail a save in progress
OVERDUE_MIN_S = 60.0      # a save younger than this is never overdue, whatever its usual time
SCAN_EVERY_S = 5.0
HUNG_AFTER_S = 10.0       # a scan still running this long is reported hung
CANDIDATES_PER_SCAN = 16  # newest step directories probed for a finish marker per scan
PROGRESS_ENTRIES = 512    # entries of the save in progress stat'ed per scan (3 levels: actor/model/dist_ckpt)
PROGRESS_DEPTH = 3
DERIVED_SERIES = ("verl_checkpoint_latest_step", "verl_checkpoint_resume_step", "verl_checkpoint_resume_steps_lost",
                  "verl_checkpoint_steps_ahead_of_run", "verl_checkpoint_save_seconds",
                  "verl_checkpoint_save_overdue_ratio", "verl_checkpoint_save_bytes",
                  "verl_checkpoint_save_idle_seconds")


@dataclass
class DirScan:
    """One scan's view of the directory."""

    tracker: int | None = None         # the tracker's step; None when the file is missing
    tracker_bad: bool = False          # present but not one integer (verl's resume would crash on it)
    tracker_empty: bool = False        # read between verl's open("w") and its write: the last value holds
    steps: dict[int, float] = field(default_factory=dict)  # every global_step_N -> the directory's mtime
    finished: dict[int, float] = field(default_factory=dict)  # step -> when its finish marker was written
    open_bytes: float = 0.0            # the newest unfinished save: bytes written so far (bounded listing)
    open_mtime: float | None = None    # ... and its newest write
    errors: list[str] = field(default_factory=list)


def _regular_mtime(path: str) -> float | None:
    """The mtime of a regular file (never through a symlink); None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def finish_time(step_dir: str) -> float | None:
    """When the save in ``step_dir`` finished (module docstring); None while it is not finished."""
    done = _regular_mtime(os.path.join(step_dir, "data.pt"))
    if done is None:
        return None
    for role in ROLES:
        role_dir = os.path.join(step_dir, role)
        if any(_is_dir(os.path.join(role_dir, part)) for part in V2_PARTS):
            manifest = _regular_mtime(os.path.join(role_dir, MANIFEST))
            if manifest is None:
                return None  # async Megatron writes still in flight
            done = max(done, manifest)
    return done


def _read_tracker(root: str, scan: DirScan) -> None:
    try:
        # O_NONBLOCK: a FIFO planted as the tracker must not block the read; refused below
        fd = os.open(os.path.join(root, TRACKER), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
    except FileNotFoundError:
        return
    except OSError as exc:
        scan.tracker_bad = True
        scan.errors.append("checkpoint_tracker_symlink" if exc.errno == errno.ELOOP else "checkpoint_tracker_unreadable")
        return
    try:
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if text.isdigit():
        scan.tracker = int(text)
    elif not text:
        scan.tracker_empty = True
    else:
        scan.tracker_bad = True
        scan.errors.append("checkpoint_tracker_unreadable")


def scan_dir(root: str, known_finished: dict[int, float]) -> DirScan:
    """One bounded scan (blocking: run it off the event loop). ``known_finished``: the steps an earlier
    scan saw finished (a finished save stays finished; only the newer ones are probed)."""
    scan = DirScan()
    try:
        with os.scandir(root) as it:
            for entry in it:
                m = STEP_DIR.match(entry.name)
                if m and entry.is_dir(follow_symlinks=False):
                    scan.steps[int(m.group(1))] = entry.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        scan.errors.append("checkpoint_dir_missing")
        return scan
    except OSError:
        scan.errors.append("checkpoint_dir_unreadable")
        return scan
    _read_tracker(root, scan)
    floor = max((s for s in known_finished if s in scan.steps), default=-1)
    if floor >= 0:  # a finished save stays finished: only the newer directories are probed
        scan.finished[floor] = known_finished[floor]
    probed = 0
    for step in sorted(scan.steps, reverse=True):
        if step <= floor or probed >= CANDIDATES_PER_SCAN:
            break
        probed += 1
        try:
            done = finish_time(os.path.join(root, f"global_step_{step}"))
        except OSError:
            scan.errors.append("checkpoint_dir_unreadable")
            continue
        if done is not None:
            scan.finished[step] = done
            break
    newest = max(scan.finished, default=-1)
    open_steps = [s for s in scan.steps if s > newest]
    if open_steps:
        _progress(os.path.join(root, f"global_step_{max(open_steps)}"), scan)
    return scan


def _progress(step_dir: str, scan: DirScan) -> None:
    """Bytes and newest mtime of a save in progress: a bounded walk (never through a symlink) of its
    first ``PROGRESS_DEPTH`` levels, at most ``PROGRESS_ENTRIES`` entries."""
    todo, seen = [(step_dir, 0)], 0
    while todo and seen < PROGRESS_ENTRIES:
        path, depth = todo.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    seen += 1
                    if seen > PROGRESS_ENTRIES:
                        break
                    st = entry.stat(follow_symlinks=False)
                    scan.open_mtime = max(scan.open_mtime or st.st_mtime, st.st_mtime)
                    if stat.S_ISREG(st.st_mode):
                        scan.open_bytes += st.st_size
                    elif stat.S_ISDIR(st.st_mode) and depth + 1 < PROGRESS_DEPTH:
                        todo.append((entry.path, depth + 1))
        except OSError:
            continue  # a part removed or unreadable while we looked: the next scan sees it again


class CheckpointWatch:
    """The checkpoint directory of one verl run: fed the log's steps and save times, polled each round."""

    def __init__(self, root: str | Path, node: str | None, *, scan_every_s: float = SCAN_EVERY_S,
                 hung_after_s: float = HUNG_AFTER_S) -> None:
        self.root, self.node = str(root), node
        self.scan_every_s, self.hung_after_s = scan_every_s, hung_after_s
        self._pending: concurrent.futures.Future[DirScan] | None = None
        self._started = -math.inf
        self._hung_reported = False
        self._finished: dict[int, float] = {}
        self._first_seen: dict[int, float] = {}
        self._seen_open: set[int] = set()  # step directories a scan saw unfinished (saves in progress)
        self._save_seconds: deque[float] = deque(maxlen=16)  # the log's timing_s/save_checkpoint
        self._dir_seconds: deque[float] = deque(maxlen=16)   # saves watched here from start to finish
        self.log_step: float | None = None
        self._resume = 0
        self._missing_said = False
        self._run_start = -math.inf

    def observe_log(self, samples: list[Sample]) -> None:
        """The tail's new samples: the run's latest step and its finished saves' durations."""
        for s in samples:
            if s.name == "verl_global_step":
                if self.log_step is None or s.value < self.log_step:
                    self._run_start = s.t  # the log's first record, or a relaunch's (its step went back)
                self.log_step = s.value
            elif s.name == "verl_stage_seconds" and s.labels.get("stage") == "checkpoint" and s.value > 0:
                self._save_seconds.append(s.value)

    def usual_save_s(self) -> float | None:
        # a directory-watched duration includes async writes the log's timer does not see: prefer it
        seen = self._dir_seconds or self._save_seconds
        return statistics.median(seen) if seen else None

    def poll(self, now: float, batch: SourceBatch) -> None:
        """Adds the directory's series to ``batch`` when a scan completed; starts the next one when due.
        Never waits for the file system."""
        if self._pending is not None:
            if not self._pending.done():
                if now - self._started > self.hung_after_s and not self._hung_reported:
                    self._hung_reported = True
                    batch.error("checkpoint_dir_hung")
                return
            done, self._pending = self._pending, None
            self._hung_reported = False
            try:
                scan = done.result()
            except Exception:  # noqa: BLE001 - counted; the log's samples in this batch must not be lost
                batch.error("checkpoint_dir_error")
            else:
                missing = "checkpoint_dir_missing" in scan.errors
                for reason in scan.errors:  # a directory not there yet (no save so far) is said once
                    if reason != "checkpoint_dir_missing" or not self._missing_said:
                        batch.error(reason)
                self._missing_said = missing
                self._emit(scan, now, batch)
        if now - self._started >= self.scan_every_s:
            self._started = now
            self._pending = self._scan_in_thread(dict(self._finished))

    def _scan_in_thread(self, known: dict[int, float]) -> concurrent.futures.Future[DirScan]:
        # a daemon thread, not an executor: a stat hung on a dead NFS server must not hold the
        # monitor's exit either (executor threads are joined at interpreter exit)
        fut: concurrent.futures.Future[DirScan] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(scan_dir(self.root, known))
            except Exception as exc:  # noqa: BLE001 - handed to the source round, which counts and logs it
                fut.set_exception(exc)

        threading.Thread(target=run, name="verl-ckpt-scan", daemon=True).start()
        return fut

    def _emit(self, scan: DirScan, now: float, batch: SourceBatch) -> None:
        if not scan.steps and {"checkpoint_dir_missing", "checkpoint_dir_unreadable"} & set(scan.errors):
            return  # nothing saved yet (the run creates the directory with its first save) or unreadable
        for step in list(self._first_seen):
            if step not in scan.steps:
                del self._first_seen[step]
        for step, mtime in scan.steps.items():
            self._first_seen.setdefault(step, min(now, mtime))
        newest = max(scan.finished, default=None)
        for step, done in scan.finished.items():
            if step in self._seen_open:  # watched from start to finish (a directory's mtime is its last entry's)
                self._dir_seconds.append(max(0.0, done - self._first_seen[step]))
        self._seen_open = {s for s in scan.steps if s not in scan.finished and (newest is None or s > newest)}
        self._finished = {s: t for s, t in {**self._finished, **scan.finished}.items() if s in scan.steps}
        labels = with_node({"job": JOB}, self.node)
        out = batch.samples
        # what trainer.resume_mode=auto would resume from: the tracker's step if its directory exists, else 0
        resume = scan.tracker if scan.tracker is not None and scan.tracker in scan.steps and not scan.tracker_bad else 0
        if scan.tracker_empty:
            resume = self._resume
        self._resume = resume
        out.append(Sample("verl_checkpoint_resume_step", labels, float(resume), now))
        if newest is not None:
            out.append(Sample("verl_checkpoint_latest_step", labels, float(newest), now))
            late = now - self._finished[newest] > TRACKER_GRACE_S
            out.append(Sample("verl_checkpoint_resume_steps_lost", labels,
                              float(newest - resume) if late and resume < newest else 0.0, now))
            if self.log_step is not None:
                # only a checkpoint finished before this run's first record can be one it ignored; its own
                # saves may run ahead of a buffered log (0.6-0.7 flush every 8 KB, i.e. every few steps)
                before_run = self._finished[newest] < self._run_start
                # the save of step N happens before the log's record N: N - 1 is a run on time
                out.append(Sample("verl_checkpoint_steps_ahead_of_run", labels,
                                  max(0.0, newest - 1 - self.log_step) if before_run else 0.0, now))
        age = self._save_age(scan, newest, now)
        usual = self.usual_save_s()
        out.append(Sample("verl_checkpoint_save_seconds", labels, age, now))
        ratio = age / usual if usual and age >= OVERDUE_MIN_S else 0.0
        out.append(Sample("verl_checkpoint_save_overdue_ratio", labels, ratio, now))
        if age > 0:  # files still growing (slow storage) or not written for a while (a stuck writer)
            out.append(Sample("verl_checkpoint_save_bytes", labels, scan.open_bytes, now))
            if scan.open_mtime is not None:
                out.append(Sample("verl_checkpoint_save_idle_seconds", labels, max(0.0, now - scan.open_mtime), now))

    def _save_age(self, scan: DirScan, newest: int | None, now: float) -> float:
        """Seconds the save in progress has run: the newest step directory newer than the newest finished
        one, while the run is at that step (a directory a crashed save left behind is not in progress)."""
        open_steps = [s for s in scan.steps if newest is None or s > newest]
        if not open_steps:
            return 0.0
        step = max(open_steps)
        if self.log_step is not None and self.log_step < step - 1 - LOG_LAG_STEPS:
            return 0.0
        return max(0.0, now - self._first_seen.get(step, now))

    def close(self) -> None:
        self._pending = None  # a scan still running ends on its own (its thread is a daemon)
