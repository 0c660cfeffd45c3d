"""Small state of a file tail (used by ``monitor/sources/verl_jsonl.py`` and ``dmon.py``): read offsets
that survive restarts, whether a writer still holds the file, and
how a tailed file is opened.

``open_regular`` opens non-blocking and refuses anything but a regular file: a FIFO nobody
writes made ``open()`` wait for a writer and froze the event loop every source shares. Symbolic links
are followed (a ``latest.jsonl`` link is ordinary); the monitor only reads through them.
"""

from __future__ import annotations

import json
import os
import stat
import threading
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
