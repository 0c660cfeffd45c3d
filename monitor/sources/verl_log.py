"""One volcengine verl JSONL log as a source: its ``JsonlTail`` polled every second, in a worker thread
with a deadline (``ThreadedRead``): a read that blocks (a hung NFS mount) marks this source down and
never stalls the others."""

from __future__ import annotations

from alerting.clock import Clock
from monitor.model import SourceBatch
from monitor.sources.base import DownLabels, FileSourceConfig, Polled, Round, ThreadedRead
from monitor.sources.stragglers import seqlen_imbalance
from monitor.sources.tail_state import OffsetStore, writer_holds
from monitor.sources.verl_checkpoints import CheckpointWatch
from monitor.sources.verl_export import VerlSeriesExport
from monitor.sources.verl_jsonl import JsonlTail, RunLiveness

READ_DEADLINE_S = 5.0  # a poll reads at most 16 MiB of a local file: far under a second when the disk answers


class VerlLogSource:
    """``offsets``: read positions that survive restarts (the daemon keeps them next to its alert
    states). ``export``: the collector that re-exports the log's series on the monitor's /metrics."""

    def __init__(self, cfg: FileSourceConfig, offsets: OffsetStore, export: VerlSeriesExport | None = None) -> None:
        tail = JsonlTail(cfg.path or "", cfg.node, offsets=offsets, resolved_config=cfg.resolved_config)
        tail.liveness = RunLiveness(cfg.total_steps, cfg.down_after, cfg.down_after_steps,
                                    writer_open=lambda: writer_holds(tail.path))
        self.tail, self.export = tail, export
        # verl's checkpoint directory, judged against the log's steps
        self.checkpoints = CheckpointWatch(cfg.checkpoint_dir, cfg.node) if cfg.checkpoint_dir else None
        self.name = self.metric = f"jsonl:{tail.path.name}"
        self.interval, self.budget, self.offset, self.wait_after = 1.0, 1.0, 0.0, True
        self.down = DownLabels("jsonl", cfg.node)
        self.reader = ThreadedRead(READ_DEADLINE_S)

    async def poll(self, clock: Clock) -> Round:
        # the tail maps verl's keys to our names as it reads them (relabel.verl_key)
        batch = await self.reader.run(self._read, clock.now())
        if self.export is not None:
            self.export.update(batch.samples)
        problem = self.tail.problem
        return Round([Polled(batch, source=self.metric)], up=not problem, problem=problem)

    def _read(self, now: float) -> SourceBatch:
        """Every file read of a round (the log, the checkpoint directory), in the reader's worker thread."""
        batch = self.tail.poll(now)
        seqlen_imbalance(batch)  # verl's own per-dp-rank load record -> one ratio
        if self.checkpoints is not None:
            self.checkpoints.observe_log(batch.samples)
            self.checkpoints.poll(now, batch)
        return batch

    async def close(self) -> None:
        self.tail.close()
        if self.checkpoints is not None:
            self.checkpoints.close()
