"""RolloutWorkerPool: ``rollout_worker_num`` generation processes under a supervisor.

Every ``map`` call is a little pipeline: a pending queue -> per-worker in-flight sets (at most
``prefetch`` each) -> replies acknowledge and become results, keyed by task id so a re-queued task
that somehow answers twice still yields one result. A dead worker (crash, OOM-kill, SIGKILL from the
``faults:`` hook, or killed by the watchdog after ``task_timeout_s``) is restarted at once and its
unacknowledged tasks go back to the front of the queue.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from typing import Any

import psutil

from verl.utils.clock import Clock, SystemClock

from .worker import GenerateFn, worker_main

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutTask:
    id: Any  # hashable and unique within one map() call
    prompt: Any
    seed: int


@dataclass(frozen=True)
class RolloutResult:
    id: Any
    output: Any
    worker: int
    error: str | None = None


@dataclass
class _Worker:
    index: int
    proc: Any
    conn: Connection
    inflight: dict[Any, RolloutTask] = field(default_factory=dict)
    last_progress: float = 0.0
    broken: bool = False
    ps: psutil.Process | None = None


def start_worker_server(preload: list[str]) -> None:
    """Start the forkserver that ``start_method="forkserver"`` workers fork from, with ``preload``
    imported once: a worker restart after a crash then costs a fork, not seconds of imports. Returns
    at once (the server imports in the background), so a caller that starts it before its own heavy
    imports gets both done in parallel. Later calls are no-ops."""
    mp.set_forkserver_preload(preload)
    forkserver.ensure_running()


class RolloutWorkerPool:
    """Metrics (optional prometheus_client objects): ``alive_gauge`` → ``verl_rollout_workers_alive``,
    ``restarts_counter`` → ``verl_rollout_worker_restarts_total``, ``cpu_gauge`` (label ``worker``) →
    ``verl_rollout_worker_cpu_ratio``."""

    def __init__(
        self,
        generate_fn: GenerateFn,
        rollout_worker_num: int = 4,
        *,
        start_method: str = "forkserver",
        prefetch: int = 2,
        task_timeout_s: float | None = None,
        max_task_crashes: int = 5,
        poll_s: float = 0.1,
        clock: Clock | None = None,
        alive_gauge: Any = None,
        restarts_counter: Any = None,
        cpu_gauge: Any = None,
    ) -> None:
        if rollout_worker_num < 1:
            raise ValueError(f"rollout_worker_num must be >= 1, got {rollout_worker_num}")
        self._fn = generate_fn
        self.num_workers = rollout_worker_num
        self._ctx = mp.get_context(start_method)
        self.prefetch = max(1, prefetch)
        self.task_timeout_s = task_timeout_s
        self.max_task_crashes = max_task_crashes
        self.poll_s = poll_s
        self.clock = clock or SystemClock()
        self._alive_gauge, self._restarts_counter, self._cpu_gauge = alive_gauge, restarts_counter, cpu_gauge
        self._workers: list[_Worker] = []
        self.restarts = 0
        self.duplicates = 0  # replies for tasks that already had a result (dropped)
        self._last_cpu_sample = 0.0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> RolloutWorkerPool:
        if not self._workers:
            self._workers = [self._spawn(i) for i in range(self.num_workers)]
            self._export_alive()
        return self

    def __enter__(self) -> RolloutWorkerPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, index: int) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=worker_main, args=(child,), name=f"rollout-worker-{index}", daemon=True)
        proc.start()
        child.close()  # only the worker holds its end: its death then reads as EOF here
        broken = False
        try:
            parent.send(("fn", self._fn))
        except (BrokenPipeError, ConnectionResetError):
            broken = True  # died at birth; the next supervise pass restarts it
        try:
            ps = psutil.Process(proc.pid)
            ps.cpu_percent(None)
        except psutil.Error:
            ps = None
        return _Worker(index, proc, parent, last_progress=self.clock.monotonic(), broken=broken, ps=ps)

    def close(self) -> None:
        for w in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                w.conn.send(None)
        for w in self._workers:
            w.proc.join(timeout=2.0)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=2.0)
            w.conn.close()
        self._workers = []
        self._export_alive()

    # ---------------------------------------------------------------- faults hook
    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to worker ``index`` (the ``faults:`` kill hook); returns its pid."""
        pid = self._workers[index].proc.pid
        os.kill(pid, sig)
        return pid

    def busy(self, index: int) -> bool:
        """Worker ``index`` is alive and holds prompts in flight (a kill now lands mid-step)."""
        if index >= len(self._workers):
            return False
        w = self._workers[index]
        return bool(w.inflight) and w.proc.is_alive()

    def alive(self) -> int:
        return sum(1 for w in self._workers if w.proc.is_alive() and not w.broken)

    # ---------------------------------------------------------------- the loop
    def map(self, tasks: list[RolloutTask]) -> list[RolloutResult]:
        """One result per task, in task order, whatever happens to the workers meanwhile."""
        self.start()
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("RolloutWorkerPool.map: task ids must be unique within one call")
        pending: deque[RolloutTask] = deque(tasks)
        results: dict[Any, RolloutResult] = {}
        crashes: dict[Any, int] = {}
        while len(results) < len(tasks):
            self._supervise(pending, results, crashes)
            self._dispatch(pending, results)
            conns = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
            ready = set(wait(conns, timeout=self.poll_s))
            for w in self._workers:
                if w.conn in ready:
                    self._drain(w, results)
            self._watchdog()
            self._sample_cpu()
        return [results[i] for i in ids]

    def _dispatch(self, pending: deque[RolloutTask], results: dict[Any, RolloutResult]) -> None:
        for w in self._workers:
            while pending and len(w.inflight) < self.prefetch and not w.broken:
                task = pending.popleft()
                if task.id in results:
                    continue
                try:
                    w.conn.send(("task", task.id, task.prompt, task.seed))
                except (BrokenPipeError, OSError):
                    pending.appendleft(task)
                    w.broken = True
                    break
                if not w.inflight:
                    w.last_progress = self.clock.monotonic()
                w.inflight[task.id] = task

    def _drain(self, w: _Worker, results: dict[Any, RolloutResult]) -> None:
        try:
            while w.conn.poll():
                kind, task_id, payload = w.conn.recv()
                w.inflight.pop(task_id, None)
                w.last_progress = self.clock.monotonic()
                if task_id in results:
                    self.duplicates += 1
                    continue
                error = payload if kind == "error" else None
                results[task_id] = RolloutResult(task_id, None if error else payload, w.index, error)
        except (EOFError, OSError):
            w.broken = True  # the worker is gone; what it finished has been read

    def _supervise(self, pending: deque[RolloutTask], results: dict[Any, RolloutResult], crashes: dict[Any, int]) -> None:
        for pos, w in enumerate(self._workers):
            if w.proc.is_alive() and not w.broken:
                continue
            self._drain(w, results)  # replies that made it out before the crash still count
            w.proc.join(timeout=1.0)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=1.0)
            w.conn.close()
            inflight = list(w.inflight.values())
            if inflight:
                # a worker runs its tasks in order: only the first was executing when it died; the
                # prefetched ones behind it are innocent bystanders and are not blamed
                crashes[inflight[0].id] = crashes.get(inflight[0].id, 0) + 1
            for task in reversed(inflight):
                if crashes.get(task.id, 0) >= self.max_task_crashes:
                    # a prompt that keeps killing workers must not crash-loop the pool forever
                    results[task.id] = RolloutResult(
                        task.id, None, w.index, f"worker crashed {crashes[task.id]} times on this prompt"
                    )
                elif task.id not in results:
                    pending.appendleft(task)
            log.warning("rollout worker %d (pid %s) died with exit code %s; restarting, %d prompt(s) re-queued",
                        w.index, w.proc.pid, w.proc.exitcode, len(w.inflight))
            self._workers[pos] = self._spawn(w.index)
            self.restarts += 1
            if self._restarts_counter is not None:
                self._restarts_counter.inc()
        self._export_alive()

    def _watchdog(self) -> None:
        if self.task_timeout_s is None:
            return
        now = self.clock.monotonic()
        for w in self._workers:
            if w.inflight and now - w.last_progress > self.task_timeout_s and w.proc.is_alive():
                log.warning("rollout worker %d made no progress for %.1fs; killing it", w.index, now - w.last_progress)
                w.proc.kill()

    def _sample_cpu(self) -> None:
        now = time.monotonic()
        if self._cpu_gauge is None or now - self._last_cpu_sample < 1.0:
            return
        self._last_cpu_sample = now
        for w in self._workers:
            try:
                ratio = w.ps.cpu_percent(None) / 100.0 if w.ps is not None else 0.0
            except psutil.Error:
                ratio = 0.0
            self._cpu_gauge.labels(worker=str(w.index)).set(ratio)

    def _export_alive(self) -> None:
        if self._alive_gauge is not None:
            self._alive_gauge.set(self.alive())
