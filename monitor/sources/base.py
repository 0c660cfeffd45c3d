"""What every source is to the daemon: a name, a schedule, and one ``poll`` per round.

The daemon runs one loop for every source (``monitor/daemon.py``) and applies the never-blind rules
there, once: the phase offset, skipping rounds it overran, the progress mark ``/healthz`` reads, and for
a round that raised, counting it, logging it once a minute and marking the source down. A source only
reads its input and returns what it read, renamed to our words (``monitor/sources/relabel.py``) before
the batch leaves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from alerting.clock import Clock
from monitor.model import SourceBatch


@dataclass
class FileSourceConfig:
    """A file source of the config (``jsonl:``, ``dmon:``): a path, or a command whose output is read."""

    path: str | None = None
    command: list[str] | None = None
    node: str | None = None
    # verl JSONL only: liveness (monitor/sources/verl_jsonl.py RunLiveness) and /metrics re-export
    total_steps: int | None = None
    down_after: float = 600.0
    down_after_steps: float = 3.0
    export: bool = False
    resolved_config: str | None = None  # the run's resolved verl config (Hydra's .hydra/config.yaml)
    checkpoint_dir: str | None = None  # the run's trainer.default_local_dir (monitor/sources/verl_checkpoints.py)


T = TypeVar("T")
_TIMEOUT: Callable[[float], Any] | None = getattr(asyncio, "timeout", None)  # Python >= 3.11


async def within(aw: Awaitable[T], seconds: float) -> T:
    """``aw`` awaited with a deadline: TimeoutError past it. On Python 3.11 ``asyncio.timeout`` cancels
    the awaiting task at the deadline; ``wait_for`` (3.10) wraps ``aw`` in a task of its own, and the
    scrapes and the loops' sleeps at 1000 GPUs made ~100 of those a second for nothing."""
    if _TIMEOUT is None:
        return await asyncio.wait_for(aw, seconds)
    async with _TIMEOUT(seconds):
        return await aw


@dataclass(frozen=True)
class TopPrompts:
    """A verl trainer's most anomalous prompts at ``t`` (its ``/api/v1/reward_outliers``): the measured
    context a RewardDistributionDrift alert of that trainer's node carries forward."""

    target: str
    node: str | None
    lines: tuple[str, ...]  # at most 3, "reward: prompt" with the prompt cut to 200 characters
    t: float


@dataclass
class Polled:
    """One batch a round read, and how the daemon files it."""

    batch: SourceBatch
    seen: float | None = None  # the monitor's time of a scrape: liveness from the scrape, not the stamps
    source: str | None = None  # whose series budget the samples use (default: the batch's source)


@dataclass
class Round:
    """What one ``poll`` returned."""

    polled: list[Polled] = field(default_factory=list)
    up: bool | None = True  # the source's verl_monitor_target_up after the round; None: left as it is
    duration: float | None = None  # seconds the round's request took (verl_monitor_scrape_duration_seconds)
    failures: list[BaseException] = field(default_factory=list)  # parts that failed, the rest ingested
    verl_nodes: set[str] = field(default_factory=set)  # nodes whose series were renamed from verl's words
    top_prompts: list[TopPrompts] = field(default_factory=list)
    problem: str | None = None  # the source's own input is unusable (a FIFO, Prometheus failing): /healthz names it
    # series budgets (targets) that left service discovery: their series are dropped, not left to go stale
    gone: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DownLabels:
    """The ``up`` series a failed round sets to 0."""

    job: str
    node: str | None = None
    instance: str | None = None


class Source(Protocol):
    name: str      # the progress mark's name in /healthz ("target trainer", "jsonl:exp.jsonl", ...)
    metric: str    # the `target` label of its error counter, up gauge and `up` series
    interval: float  # seconds from one round's start to the next's (0: back to back, a stream) ...
    wait_after: bool  # ... or, when True, from one round's end: a slow input is asked less often
    budget: float  # a round not completed for 3 budgets degrades /healthz
    offset: float  # seconds after start of the first round
    down: DownLabels

    async def poll(self, clock: Clock) -> Round: ...

    async def close(self) -> None: ...


class ReadDeadline(Exception):
    """A blocking read did not return within its deadline (a hung NFS server, a stuck device)."""


class ThreadedRead:
    """Runs a source's blocking file read in a worker thread with a deadline, so that no read can hold
    the event loop every source shares. A read past its deadline raises ``ReadDeadline`` (the
    daemon marks the source down, /healthz names it) and goes on in its thread; the next call waits for
    that same read, and its result is used once it comes: one read in flight per source, never a pile."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._job: asyncio.Future[Any] | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._job is None:
            self._job = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        job = self._job
        try:
            return await asyncio.wait_for(asyncio.shield(job), self.deadline_s)
        except asyncio.TimeoutError:
            raise ReadDeadline(f"read not finished within {self.deadline_s:g}s (still waiting for it)") from None
        finally:
            if job.done():
                self._job = None
