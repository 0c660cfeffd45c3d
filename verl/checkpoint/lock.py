"""One writer per checkpoint directory: an exclusive ``flock`` on ``DIR/.lock``.

The kernel releases a ``flock`` when its holder dies (kill -9 included), so the lock itself can never go
stale; the file's content (host, pid, run id, start time) is only information: for the one-line refusal
of a second trainer, and to say "taken over from a dead pid" when a killed run's file is found. A lock
on NFS is only as good as the server's ``flock`` support (local disks and Lustre/GPFS honour it).

The file is opened ``O_NOFOLLOW`` and must be a regular file with one link: a ``.lock``
planted as a symbolic or hard link to a file elsewhere would otherwise have that file truncated when
the holder's line is written. It is refused with one line naming the path (``verl-train`` exits 2).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from verl.config import TrainerConfigError

LOCK_FILE = ".lock"
log = logging.getLogger(__name__)


class DirectoryLocked(TrainerConfigError):
    """Another live trainer holds the directory: ``verl-train`` prints it as one line and exits 2."""


def _describe(holder: dict[str, Any]) -> str:
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} (run {holder.get('run_id', '?')})"


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class DirLock:
    """``acquire()`` or raise ``DirectoryLocked``; ``release()`` (also on process death, by the kernel)."""

    def __init__(self, root: str | Path, run_id: str) -> None:
        self.root = Path(root)
        self.path = self.root / LOCK_FILE
        self.run_id = run_id
        self._fd: int | None = None
        self.previous: dict[str, Any] = {}
        """The content found in the file when it was taken: a dead holder's host/pid, or {}."""

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        unsafe = (f"checkpoint dir lock {self.path} is not a plain file of its own (a symbolic or hard link, or "
                  "not a regular file); refusing to write through it: remove it and start again")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: what FreeBSD says for a link under O_NOFOLLOW
                raise DirectoryLocked(unsafe) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise DirectoryLocked(unsafe)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise DirectoryLocked(
                f"checkpoint dir '{self.root}' is in use by {_describe(holder)}: one trainer per directory; "
                "stop that run or pass another --checkpoint-dir") from None
        self.previous = _read(fd)
        if self.previous:
            # we got the lock, so its last holder is gone (exited or killed): the file is what it left
            log.info("checkpoint dir %s: lock of %s released (process ended), taken over", self.root,
                     _describe(self.previous))
        me = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": self.run_id, "since": time.time()}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(me) + "\n").encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
