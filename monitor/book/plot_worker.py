"""Alert plots rendered in a child process, so matplotlib never loads into the monitor.

matplotlib, its fonts and its caches are ~40-50 MiB of resident memory that stay for good once the first
plot renders (an alert rule with ``plot: true``, often in the first hour): the monitor's memory would step
up by that much at an unpredictable time. Here a child interpreter imports matplotlib, renders the PNG from
the small arrays it is sent (``plots.fit_png``, the same function, so the same bytes) and sends them back;
the monitor writes the file. The child exits once idle for ``idle_s`` (an alert storm keeps one child for
its burst), and after ``max_jobs`` renders (matplotlib's caches only grow); a child that does not answer
within ``timeout_s`` is killed, so a wedged renderer costs one plot, never the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from monitor.book.plots import fit_png

log = logging.getLogger("monitor.plots")

IDLE_S = 60.0
TIMEOUT_S = 20.0  # the first render also starts the child and imports matplotlib (1-3 s on a loaded host)
MAX_JOBS = 200


def _serve(jobs: Connection, results: Connection, idle_s: float, max_jobs: int) -> None:
    """The child's loop: one job in, ("ok", png or None) or ("error", message) out, until idle or done."""
    for _ in range(max_jobs):
        try:
            if not jobs.poll(idle_s):
                break
            job = jobs.recv()
        except (EOFError, OSError):  # the monitor is gone (its end of the pipe closed): so is this child
            break
        if job is None:
            break
        try:
            results.send(("ok", fit_png(*job)))
        except Exception as exc:  # reported to the parent, which logs it; the child stays usable
            results.send(("error", f"{type(exc).__name__}: {exc}"))


class PlotWorker:
    """``render(...)`` is ``plots.fit_png(...)`` run in the child; None when it fails or times out
    (``failures`` counts those; the first is logged as a warning, later ones at debug level)."""

    def __init__(self, timeout_s: float = TIMEOUT_S, idle_s: float = IDLE_S, max_jobs: int = MAX_JOBS) -> None:
        self.timeout_s, self.idle_s, self.max_jobs = timeout_s, idle_s, max_jobs
        self.failures = 0
        self.children_started = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._jobs_conn: Connection | None = None
        self._results: Connection | None = None
        self._jobs = 0
        self._closed = False

    def render(self, t: np.ndarray, v: np.ndarray, details: dict[str, float], title: str,
               ylabel: str = "") -> bytes | None:
        job = (np.asarray(t, dtype=float), np.asarray(v, dtype=float), dict(details), title, ylabel)
        with self._lock:
            for attempt in (1, 2):  # a child that just exited idle answers EOF: a fresh one gets the job
                if self._closed:
                    return None  # no new child once closed
                try:
                    status, value = self._ask(job)
                except (EOFError, BrokenPipeError):
                    self._stop(kill=False)
                    if attempt == 1:
                        continue
                    return self._failed("the plot process exited")
                except (OSError, TimeoutError) as exc:
                    self._stop(kill=True)
                    return self._failed(str(exc) or type(exc).__name__)
                if status == "ok":
                    return value  # type: ignore[no-any-return]
                return self._failed(str(value))
        return None

    def _ask(self, job: tuple[Any, ...]) -> tuple[str, Any]:
        if self._proc is None or self._proc.poll() is not None or self._jobs >= self.max_jobs:
            self._stop(kill=False)
            self._start()
        assert self._jobs_conn is not None and self._results is not None
        self._jobs += 1
        self._jobs_conn.send(job)
        if not self._results.poll(self.timeout_s):
            raise TimeoutError(f"no plot within {self.timeout_s:g} s")
        return self._results.recv()  # type: ignore[no-any-return]

    def _start(self) -> None:
        # A fresh interpreter (not fork: a forked child shares the monitor's heap pages and its threads'
        # locks; not multiprocessing's spawn: that re-runs the parent's __main__ script in the child),
        # speaking multiprocessing's framed pickles over two pipes.
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        root = str(Path(__file__).resolve().parents[2])  # the folder holding this monitor package, whatever the cwd
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        code = "import sys; from monitor.book.plot_worker import child_main; child_main(sys.argv[1:])"
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, str(job_r), str(res_w), repr(self.idle_s), str(self.max_jobs)],
                pass_fds=(job_r, res_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        finally:
            os.close(job_r)
            os.close(res_w)
        self._jobs_conn = Connection(job_w, readable=False)
        self._results = Connection(res_r, writable=False)
        self._jobs = 0
        self.children_started += 1

    def _stop(self, kill: bool) -> None:
        proc, jobs, results = self._proc, self._jobs_conn, self._results
        self._proc = self._jobs_conn = self._results = None
        if jobs is not None:
            if not kill:
                with contextlib.suppress(OSError):
                    jobs.send(None)  # the child's loop ends at a None
            jobs.close()
        if results is not None:
            results.close()
        if proc is not None:
            if kill:
                proc.kill()
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5.0)

    def _failed(self, why: str) -> None:
        self.failures += 1
        (log.warning if self.failures == 1 else log.debug)("plot rendering failed (%d so far): %s",
                                                            self.failures, why)
        return None

    def close(self) -> None:
        """Ends the child. A render in flight (another thread) is not waited for past a second: its child
        is killed and that render returns None; no new child starts after this."""
        self._closed = True
        if self._lock.acquire(timeout=1.0):
            try:
                self._stop(kill=False)
            finally:
                self._lock.release()
        elif (proc := self._proc) is not None:
            proc.kill()


def child_main(argv: list[str]) -> None:
    """The child process: ``argv`` is the jobs pipe's read end, the results pipe's write end, idle_s, max_jobs."""
    jobs, results = Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False)
    _serve(jobs, results, float(argv[2]), int(argv[3]))
