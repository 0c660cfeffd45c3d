"""Tail of volcengine verl's ``file`` logger (``trainer.logger=[...,"file"]``, ``verl/utils/tracking.py``).

verl writes ``{"step": N, "data": {...}}`` per line (flat ``{key: value}`` lines are accepted too), with
no timestamp; it opens the file with ``"w"`` (truncated on every restart); 0.6-0.7 write through
Python's text buffer (8 KB bursts, NaN as ``NaN``), 0.8+ unbuffered with orjson (NaN as ``null``).

Guarantees:

- *Every record keeps its own sample.* Its time is its own ``timestamp``/``_timestamp``/``time`` field
  when it has one (NaN/Inf rejected and counted ``nonfinite_timestamp``); otherwise it is reconstructed
  from the run's own timers: the newest record of a read is anchored at the file's modification time
  (minus one step when a half-written line follows it: the buffered writer flushed while writing the
  next record) and each earlier one sits ``timing_s/step`` (+ ``testing``, ``save_checkpoint``) before
  its successor. Reconstructed times stay strictly after the previous read's last record (compressed
  proportionally if the timers claim more time than passed); records with no time information at all
  are spread evenly in arrival order (a first backlog of such records: 1 s apart, ending at the mtime);
  ``perf/time_per_step`` stands in for ``timing_s/step`` when only it is there. A backlog, a finished
  file and a monitor restart therefore keep the run's spacing.
- *Nothing skipped.* The open file is drained before a rename is followed (re-open by inode);
  truncation (copytruncate, a verl restart) is noticed by size and by the file's first bytes; NUL
  padding left by copytruncate under a non-appending writer is stripped; a half-written last line waits
  for its newline; a line glued to a crashed writer's fragment is recovered from its own ``{``.
- *The offset survives restarts*: an ``OffsetStore`` (the daemon's is ``jsonl-offsets.json`` next to its
  state_db) keeps dev/inode, offset, head bytes and the last record time per path.
- *No blind window after a restart*: a tail that resumes a saved offset first re-reads the
  records before it (at most ``HISTORY_RECORDS`` / ``HISTORY_BYTES``), timed backwards from the saved
  last record time by their timers, and returns them with the first poll, so the detectors judge the
  first new record with the windows they had (the non-finite step counter is replayed flat: a NaN step
  before the restart was already counted and paged).
- ``null``/NaN/Inf values are counted (``nonfinite_value``); a record with one in an ``actor/*`` or
  ``critic/*`` key counts as a non-finite step: ``verl_nonfinite_steps_total`` feeds NonFiniteGradients.

- *Bounded*: the path is opened non-blocking and must be a regular file (a FIFO is refused,
  the source marked down by name: ``problem``); a poll reads at most ``read_limit`` bytes (the backlog
  continues on the next poll), and a line longer than ``MAX_LINE_BYTES`` is skipped to its newline,
  counted ``line_too_long`` once, so memory stays bounded whatever the file holds.

Liveness (TrainerDown for a JSONL source) lives in :class:`RunLiveness` (``tail_state.py``), fed by the
tail each poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import statistics
from collections import deque
from pathlib import Path
from typing import BinaryIO

import yaml

from monitor.model import Sample, SourceBatch, with_node
from monitor.sources import relabel, verl_keys
from monitor.sources.tail_state import NotRegularFile, OffsetStore, open_regular, writer_holds
from monitor.sources.verl_gaps import ExpectedGaps
from monitor.sources.verl_liveness import IN_PROGRESS, JOB, RunLiveness, in_progress, running_step
from monitor.sources.verl_liveness import MIN_SPACING_S as _EPS
from monitor.sources.verl_stages import stage_shares

__all__ = ["IN_PROGRESS", "JOB", "JsonlTail", "MappedRecord", "RunLiveness", "in_progress"]

TIME_KEYS = ("timestamp", "_timestamp", "time")
HEAD_BYTES = 64
UNKNOWN_SPACING_S = 1.0        # spacing of a first backlog without any time information
HISTORY_RECORDS = 240          # records re-read before a resumed offset (the longest step window + warm-up)
HISTORY_BYTES = 4 << 20
READ_LIMIT = 16 << 20          # bytes read per poll at most (a backlog drains over several polls)
MAX_LINE_BYTES = 4 << 20       # verl's lines are a few KB; a longer one is not a record: skipped, counted
CONFIG_BYTES = 4 << 20         # of the run's resolved config (Hydra's config.yaml is a few KB)

_number = verl_keys.finite_number


class MappedRecord:
    """One verl record's samples at time ``t``; counts its non-finite values."""

    def __init__(self, record: dict, node: str | None) -> None:
        self.data = record.get("data") if isinstance(record.get("data"), dict) else record
        self.step = _number(record.get("step", self.data.get("training/global_step")))
        self.node = node
        self.interval = verl_keys.record_interval(self.data)

    def samples(self, t: float, batch: SourceBatch) -> bool:
        """Append this record's samples; True if it carried a non-finite actor/critic value."""
        out, labels0 = batch.samples, {"job": JOB}
        nonfinite = False
        if self.step is not None:
            out.append(Sample("verl_global_step", with_node(labels0, self.node), self.step, t))
        for key, raw in (self.data | verl_keys.derived(self.data)).items():  # + the train-validation gap
            if key in TIME_KEYS or key == "step" or (key == "training/global_step" and self.step is not None):
                continue
            if raw is None or (isinstance(raw, int | float) and not isinstance(raw, bool)):
                value = _number(raw)
                if value is None:
                    batch.error("nonfinite_value")
                    nonfinite = nonfinite or key.startswith(verl_keys.NONFINITE_PREFIXES)
                    continue
                m = relabel.verl_key(key)  # our name, labels and unit: the source edge
                if m is None:
                    continue
                out.append(Sample(m.name, with_node({**labels0, **m.labels}, self.node), value * m.factor, t))
        out.extend(stage_shares(self.data, labels0, self.node, t))
        return nonfinite


class JsonlTail:
    """Follows one verl JSONL file; ``poll(now)`` returns what arrived since the last poll."""

    def __init__(self, path: str | Path, node: str | None = None, *, offsets: OffsetStore | None = None,
                 liveness: RunLiveness | None = None, read_limit: int = READ_LIMIT,
                 resolved_config: str | Path | None = None) -> None:
        self.path = Path(path)
        self.resolved_config = Path(resolved_config) if resolved_config else None
        self._config_mtime: float | None = None
        self.node = node
        self.offsets = offsets or OffsetStore(None)
        self.liveness = liveness or RunLiveness(writer_open=lambda: writer_holds(self.path))
        self.read_limit = read_limit
        self.source = f"jsonl:{self.path.name}"
        self._fh: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._head = ""
        self._t_last = -math.inf
        self._nonfinite_steps = 0
        self._intervals: deque[float] = deque(maxlen=32)
        self._opened_mtime: float | None = None
        self._saved = self.offsets.get(str(self.path.resolve()))
        self._history = b""  # the records before a resumed offset, replayed with the first poll
        self._opened_before = False  # a re-open after a read error resumes without replaying history
        self._progress_t = -math.inf  # time of the last verl_step_in_progress_seconds sample
        self._step_ends: list[float] = []  # this poll's records that a line-by-line writer wrote as they ended
        self._skipping = False  # inside an over-long line: discard up to its newline
        self.gaps = ExpectedGaps(total_steps=self.liveness.total_steps)  # validation/save steps (TrainingStalled)
        self.record_extras: list[tuple[float, float]] = []  # this poll's (record time, extra s due after it)
        self.problem: str | None = None  # why the path cannot be read at all (the source is down, /healthz)

    # -- file handling -------------------------------------------------------------------------------

    def _head_of(self, fh: BinaryIO) -> str:
        pos = fh.tell()
        fh.seek(0)
        head = fh.read(HEAD_BYTES)
        fh.seek(pos)
        return hashlib.sha1(head).hexdigest() if len(head) == HEAD_BYTES else ""

    def _open(self, batch: SourceBatch) -> bool:
        try:
            fh = open_regular(self.path)
        except FileNotFoundError:
            batch.error("file_missing")
            return False
        except NotRegularFile as exc:
            batch.error("not_regular_file")
            self.problem = str(exc)
            return False
        except OSError as exc:
            batch.error("read_error")
            self.problem = f"{self.path}: cannot open ({exc.strerror})"
            return False
        self.problem = None
        st = os.fstat(fh.fileno())
        self._fh, self._ino, self._offset, self._partial, self._head = fh, (st.st_dev, st.st_ino), 0, b"", ""
        self._opened_mtime = st.st_mtime
        saved, self._saved = self._saved, None
        same_file = bool(saved) and (saved.get("dev"), saved.get("ino")) == self._ino  # type: ignore[union-attr]
        if saved and same_file and st.st_size >= int(saved.get("offset", 0)) and (
                not saved.get("head") or saved.get("head") == self._head_of(fh)):
            self._offset = int(saved.get("offset", 0))
            self._head = str(saved.get("head", ""))
            t_last = saved.get("t_last")
            self._t_last = float(t_last) if isinstance(t_last, int | float) else -math.inf
            self._nonfinite_steps = int(saved.get("nonfinite_steps", 0))
            if self._offset > 0 and math.isfinite(self._t_last) and not self._opened_before:
                start = max(0, self._offset - HISTORY_BYTES)
                fh.seek(start)
                back = fh.read(self._offset - start)
                self._history = back if start == 0 else back[back.find(b"\n") + 1:]
        fh.seek(self._offset)
        self._opened_before = True
        return True

    def _replay_history(self, batch: SourceBatch) -> float | None:
        """The records before a resumed offset (module docstring), timed back from the saved last time."""
        raw, self._history = self._history, b""
        records = [MappedRecord(r, self.node) for r in
                   (self._parse(line, SourceBatch(self.source)) for line in raw.split(b"\n")[-HISTORY_RECORDS - 1:])
                   if r is not None]
        known = [m.interval for m in records if m.interval is not None]
        typical = statistics.median(known) if known else UNKNOWN_SPACING_S
        t = self._t_last
        stamped: list[tuple[MappedRecord, float]] = []
        for m in reversed(records):
            stamped.append((m, t))
            t -= max(m.interval if m.interval is not None else typical, _EPS)
        scratch = SourceBatch(self.source)  # its value errors were counted when the records first arrived
        for m, ts in reversed(stamped):
            m.samples(ts, scratch)
            self.gaps.observe(m.step, m.data, m.interval)
            self.record_extras.append((ts, self.gaps.extra_s()))
            batch.samples.append(Sample("verl_nonfinite_steps_total", with_node({"job": JOB}, self.node),
                                        float(self._nonfinite_steps), ts))
            if m.interval is not None:
                self._intervals.append(m.interval)
            if verl_keys.release_08(m.data):
                self._step_ends.append(ts)
        batch.samples.extend(scratch.samples)
        # the run's last step before the offset: liveness (TrainerDown, the running step) judges a run
        # that logs nothing new after a restart -- one that hangs -- from it
        return next((m.step for m in reversed(records) if m.step is not None), None)

    def _read(self, batch: SourceBatch) -> bytes:
        """Everything new, following truncation and rotation; the old file is drained first."""
        if self._fh is None and not self._open(batch):
            return b""
        assert self._fh is not None
        chunks = []
        st = os.fstat(self._fh.fileno())
        head = self._head_of(self._fh) if self._head else ""
        if st.st_size < self._offset or (self._head and head and head != self._head):
            batch.error("truncated")  # copytruncate or a verl restart ("w"): start over
            self._offset, self._partial, self._head = 0, b"", ""
            self.liveness.restarted()
            self.gaps.restarted()
            self._fh.seek(0)
        chunks.append(self._fh.read(self.read_limit))
        try:
            now_st = os.stat(self.path)
            rotated = (now_st.st_dev, now_st.st_ino) != self._ino
        except FileNotFoundError:
            rotated = False  # renamed away, nothing new yet: keep the old file open
        if rotated:
            self._offset += len(chunks[0])
            tail = self._partial + chunks[0]
            self._fh.close()
            self._fh = None
            self._opened_mtime = None
            chunks = [tail if tail.endswith(b"\n") or not tail else tail + b"\n"]
            self._partial = b""
            if self._open(batch):
                assert self._fh is not None
                self._fh.seek(0)
                self._offset = 0
                chunks.append(self._fh.read(self.read_limit))
                self._offset = len(chunks[-1])
            return b"".join(chunks)
        self._offset += len(chunks[0])
        return self._partial + chunks[0]

    def _bounded_lines(self, text: bytes, batch: SourceBatch) -> list[bytes]:
        """Complete lines of ``text`` (the rest kept as the partial line), over-long ones left out."""
        if self._skipping:
            nl = text.find(b"\n")
            if nl < 0:
                self._partial = b""
                return []
            text, self._skipping = text[nl + 1:], False
        lines = text.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:  # a "line" this long is not verl's: skipped to its newline
            batch.error("line_too_long")
            self._partial, self._skipping = b"", True
        kept = [line for line in lines if len(line) <= MAX_LINE_BYTES]
        if len(kept) < len(lines):
            batch.error("line_too_long", len(lines) - len(kept))
        return kept

    def _mtime(self) -> float | None:
        try:
            return os.fstat(self._fh.fileno()).st_mtime if self._fh else None
        except OSError:
            return None

    # -- records -------------------------------------------------------------------------------------

    @staticmethod
    def _parse(line: bytes, batch: SourceBatch) -> dict | None:
        line = line.strip(b"\x00 \t\r")
        if not line:
            return None
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
            # a crashed writer's fragment glued to the next writer's first line: the outermost '{"' that
            # parses is that line's start (a few tries only: a garbage line must stay cheap)
            pos, tries = line.find(b'{"', 1), 0
            while pos != -1 and tries < 8:
                tries += 1
                try:
                    record = json.loads(line[pos:])
                    break
                except (ValueError, RecursionError):
                    pos = line.find(b'{"', pos + 1)
            batch.error("malformed_json")
        if not isinstance(record, dict):
            if record is not None:
                batch.error("malformed_json")
            return None
        return record

    def _times(self, records: list[MappedRecord], anchor: float) -> list[float]:
        """Reconstructed times for records without their own time (see the module docstring)."""
        k = len(records)
        known = [r.interval for r in records if r.interval is not None] or list(self._intervals)
        typical = statistics.median(known) if known else None
        lower = self._t_last
        if typical is None:
            if math.isfinite(lower) and anchor > lower:
                return [lower + (anchor - lower) * (i + 1) / k for i in range(k)]
            if math.isfinite(lower):
                base = max(anchor, lower + _EPS * k)
                return [base - _EPS * (k - 1 - i) for i in range(k)]
            # a first backlog with no timers at all: one second apart, ending at the anchor (a guess,
            # but one that keeps every record and its order)
            return [anchor - UNKNOWN_SPACING_S * (k - 1 - i) for i in range(k)]
        gaps = [r.interval if r.interval is not None else typical for r in records]
        ts = [anchor] * k
        for i in range(k - 2, -1, -1):
            ts[i] = ts[i + 1] - max(gaps[i + 1], _EPS)
        if math.isfinite(lower) and ts[0] <= lower:
            # the timers claim more time than passed since the last read: compress into (lower, anchor]
            weights = [max(g, _EPS) for g in gaps]
            total, acc = sum(weights), 0.0
            span = max(anchor - lower, _EPS * k)
            for i, w in enumerate(weights):
                acc += w
                ts[i] = lower + span * acc / total
        return ts

    def poll(self, now: float) -> SourceBatch:
        batch = SourceBatch(self.source)
        self.record_extras = []
        first_open = self._fh is None
        offset_before = self._offset
        try:
            text = self._read(batch)
        except OSError as exc:  # stale NFS handle, EIO: reopen next poll at the same place
            batch.error("read_error")
            self.problem = f"{self.path}: read failed ({exc.strerror})"
            self._offset = offset_before
            self._saved = self._state() if self._ino is not None else None
            self.close()
            self._partial = b""
            return batch
        grew = self._offset != offset_before and not first_open
        history_step = self._replay_history(batch) if self._history else None
        lines = self._bounded_lines(text, batch)
        own: list[tuple[int, MappedRecord, float]] = []
        timeless: list[tuple[int, MappedRecord]] = []
        for i, line in enumerate(lines):
            record = self._parse(line, batch)
            if record is None:
                continue
            mapped = MappedRecord(record, self.node)
            stamp = next((record[k] for k in TIME_KEYS if k in record and not isinstance(record[k], bool)), None)
            if stamp is not None:
                t = _number(stamp)
                if t is None:
                    batch.error("nonfinite_timestamp")
                    continue
                own.append((i, mapped, t))
            else:
                timeless.append((i, mapped))
        mtime = self._mtime()
        anchor = min(mtime if mtime is not None else now, now)
        if self._partial and self._intervals:
            anchor -= statistics.median(self._intervals)  # flushed mid-record: the last full one is older
        stamped = [(i, m, t) for i, m, t in own]
        if timeless:
            times = self._times([m for _, m in timeless], anchor)
            stamped += [(i, m, t) for (i, m), t in zip(timeless, times, strict=True)]
        stamped.sort(key=lambda x: x[0])
        last_step: float | None = history_step
        for _, m, t in stamped:
            if m.samples(t, batch):
                self._nonfinite_steps += 1
            self.gaps.observe(m.step, m.data, m.interval)
            self.record_extras.append((t, self.gaps.extra_s()))
            batch.samples.append(Sample("verl_nonfinite_steps_total", with_node({"job": JOB}, self.node),
                                        float(self._nonfinite_steps), t))
            if m.interval is not None:
                self._intervals.append(m.interval)
            self._t_last = max(self._t_last, t)
            last_step = m.step if m.step is not None else last_step
            if verl_keys.release_08(m.data):
                self._step_ends.append(t)
        if stamped or grew or (first_open and self._opened_mtime is not None):
            arrival = min(self._opened_mtime, now) if first_open and self._opened_mtime is not None else now
            self.liveness.observe(arrival, last_step, [m.interval for _, m, _ in stamped if m.interval is not None])
        self._config_info(now, batch)
        self.liveness.expected_extra_s = self.gaps.extra_s()
        up = self.liveness.up(now) if self._ino is not None else None
        if up is not None:
            batch.samples.append(Sample("up", with_node({"job": "verl", "target": self.source}, self.node), up, now))
        if self._ino is not None:
            batch.samples.extend(self.liveness.end_samples(now, with_node({"job": JOB}, self.node)))
        running = self.liveness.running(now, self._t_last) if self._ino is not None else None
        if running is not None:  # TrainingStalled's hang rule: how long the current step runs
            self._progress_t = running_step(batch.samples, with_node({"job": JOB}, self.node),
                                            [*self._step_ends, self._t_last], running, now, self._progress_t,
                                            self.gaps)
        self._step_ends = []
        self._save()
        return batch

    def _config_info(self, now: float, batch: SourceBatch) -> None:
        """The run's resolved config, as ``verl_config_info`` (read again when the file changes)."""
        if self.resolved_config is None:
            return
        try:
            mtime = self.resolved_config.stat().st_mtime
            if mtime == self._config_mtime:
                return
            self._config_mtime = mtime
            with open_regular(self.resolved_config) as fh:  # never a FIFO's blocking read
                doc = yaml.safe_load(fh.read(CONFIG_BYTES).decode("utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            batch.error("config_unreadable")
            return
        labels, total = verl_keys.config_info(doc if isinstance(doc, dict) else {})
        if total is not None and self.liveness.total_steps is None:
            self.liveness.total_steps = total
        self.gaps.configure_from(doc if isinstance(doc, dict) else {}, self.liveness.total_steps)
        batch.samples.append(Sample("verl_config_info", with_node({"job": JOB, **labels}, self.node), 1.0, now))

    def _state(self) -> dict:
        assert self._ino is not None
        return {"dev": self._ino[0], "ino": self._ino[1], "offset": self._offset - len(self._partial),
                "head": self._head, "t_last": self._t_last if math.isfinite(self._t_last) else None,
                "nonfinite_steps": self._nonfinite_steps}

    def _save(self) -> None:
        if self._ino is None:
            return
        if self._fh is not None and not self._head:
            self._head = self._head_of(self._fh)
        self.offsets.put(str(self.path.resolve()), self._state())

    def close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
