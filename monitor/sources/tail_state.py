"""Small state of a file tail: read offsets that survive restarts, and whether a writer still holds
the file (used by ``monitor/sources/verl_jsonl.py``)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from alerting.durable import write_replace


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
