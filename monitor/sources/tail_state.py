"""Small state of a file tail (used by ``monitor/sources/verl_jsonl.py`` and ``dmon.py``): read offsets
that survive restarts, whether a writer still holds the file and whether the run behind it is alive, and
how a tailed file is opened.

``open_regular`` opens non-blocking and refuses anything but a regular file (issue 36): a FIFO nobody
writes made ``open()`` wait for a writer and froze the event loop every source shares. Symbolic links
are followed (a ``latest.jsonl`` link is ordinary); the monitor only reads through them.
"""

from __future__ import annotations

import json
import math
import os
import stat
import statistics
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from alerting.durable import write_replace


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory: a tail reads regular files only."""


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading without ever blocking; NotRegularFile (naming it) when it is not a
    regular file, FileNotFoundError / OSError as ``open`` would raise them."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "FIFO" if stat.S_ISFIFO(mode) else "directory" if stat.S_ISDIR(mode) else "special file"
        raise NotRegularFile(f"{path} is a {kind}, not a regular file: point the source at the log file itself")
    return os.fdopen(fd, "rb")


class OffsetStore:
    """Read positions per path in one small JSON file, replaced atomically on each save."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._doc: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file() and not self.path.is_symlink():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                self._doc = doc if isinstance(doc, dict) else {}
            except (OSError, ValueError):
                self._doc = {}  # a damaged state file costs a re-read from the start, not the monitor

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._doc.get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:  # the tails read in worker threads (verl_log.py)
            if self._doc.get(key) == entry:
                return
            self._doc[key] = entry
            if self.path is None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_replace(self.path, json.dumps(self._doc).encode())
            except OSError:
                pass  # the offset is an optimisation; the next save retries


def writer_holds(path: Path) -> bool | None:
    """Whether any process we can see has ``path`` open (None when /proc cannot tell)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    try:
        target = os.path.realpath(path)
        me = str(os.getpid())
        for pid in os.listdir(proc):
            if not pid.isdigit() or pid == me:
                continue
            fd_dir = proc / pid / "fd"
            try:
                for fd in os.listdir(fd_dir):
                    if os.readlink(fd_dir / fd) == target:
                        return True
            except OSError:
                continue
    except OSError:
        return None
    return False


class RunLiveness:
    """Is the run behind a JSONL file alive, finished, or down?

    ``up`` is 1 while the file keeps growing within ``max(down_after_s, down_after_steps x step
    interval)`` (the step interval being the larger of verl's own step time and the typical gap between
    writes: 0.6-0.7 flush only every 8 KB, i.e. every few steps); after that the run is *finished* (quiet for good) when its last step reached
    ``total_steps`` or, with ``total_steps`` unknown, when no process holds the file open any more;
    otherwise it is *down* (0): stopped before its last step, or the writer is alive but stuck. A
    file already idle that long when the monitor starts, or one without a record yet, is not judged
    (``up`` is None).
    """

    def __init__(self, total_steps: int | None = None, down_after_s: float = 600.0, down_after_steps: float = 3.0,
                 writer_open: Callable[[], bool | None] | None = None, check_every_s: float = 30.0) -> None:
        self.total_steps, self.down_after_s, self.down_after_steps = total_steps, down_after_s, down_after_steps
        self.writer_open = writer_open or (lambda: None)
        self.check_every_s = check_every_s
        self.state = "waiting"         # waiting | live | finished | down | idle_at_start
        self.last_arrival = -math.inf
        self.last_step: float | None = None
        self._intervals: deque[float] = deque(maxlen=16)
        self._write_gaps: deque[float] = deque(maxlen=16)
        self._checked_at = -math.inf
        self._writer: bool | None = None

    def window(self) -> float:
        step = statistics.median(self._intervals) if self._intervals else 0.0
        writes = statistics.median(self._write_gaps) if self._write_gaps else 0.0
        return max(self.down_after_s, self.down_after_steps * max(step, writes))

    def observe(self, arrival: float, step: float | None, intervals: list[float]) -> None:
        """Records arrived (``arrival``: now, or the file's mtime for what was there before we looked)."""
        self._intervals.extend(intervals)
        if step is not None:
            self.last_step = step
        if self.state != "waiting" and math.isfinite(self.last_arrival) and arrival > self.last_arrival:
            self._write_gaps.append(arrival - self.last_arrival)
        self.last_arrival = max(self.last_arrival, arrival)
        if self.state != "waiting" and arrival >= self.last_arrival:
            self.state = "live"  # new records after a finish or an outage: a (re)started run

    def up(self, now: float) -> float | None:
        if self.state == "waiting" and math.isfinite(self.last_arrival):
            self.state = "idle_at_start" if now - self.last_arrival > self.window() else "live"
        if self.state in ("waiting", "idle_at_start") or self.last_step is None:
            return None  # nothing to judge before the first record (model loading, compilation, 8 KB buffer)
        if self.state == "finished":
            return 1.0
        if self.total_steps is not None and self.last_step is not None and self.last_step >= self.total_steps:
            self.state = "finished"
            return 1.0
        if now - self.last_arrival <= self.window():
            self.state = "live"
            return 1.0
        if now - self._checked_at >= self.check_every_s:
            self._checked_at = now
            self._writer = self.writer_open()
        if self.total_steps is None and self._writer is False:
            self.state = "finished"  # the writer closed the file (verl's FileLogger.finish)
            return 1.0
        self.state = "down"
        return 0.0
