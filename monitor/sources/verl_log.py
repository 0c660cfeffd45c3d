"""One volcengine verl JSONL log as a source: its ``JsonlTail`` polled every second."""

from __future__ import annotations

from alerting.clock import Clock
from monitor.config import FileSourceConfig
from monitor.sources.base import DownLabels, Polled, Round
from monitor.sources.stragglers import seqlen_imbalance
from monitor.sources.tail_state import OffsetStore, writer_holds
from monitor.sources.verl_checkpoints import CheckpointWatch
from monitor.sources.verl_export import VerlSeriesExport
from monitor.sources.verl_jsonl import JsonlTail, RunLiveness


class VerlLogSource:
    """``offsets``: read positions that survive restarts (the daemon keeps them next to its alert
    states). ``export``: the collector that re-exports the log's series on the monitor's /metrics."""

    def __init__(self, cfg: FileSourceConfig, offsets: OffsetStore, export: VerlSeriesExport | None = None) -> None:
        tail = JsonlTail(cfg.path or "", cfg.node, offsets=offsets, resolved_config=cfg.resolved_config)
        tail.liveness = RunLiveness(cfg.total_steps, cfg.down_after, cfg.down_after_steps,
                                    writer_open=lambda: writer_holds(tail.path))
        self.tail, self.export = tail, export
        # verl's checkpoint directory, judged against the log's steps (issue 33.5)
        self.checkpoints = CheckpointWatch(cfg.checkpoint_dir, cfg.node) if cfg.checkpoint_dir else None
        self.name = self.metric = f"jsonl:{tail.path.name}"
        self.interval, self.budget, self.offset, self.wait_after = 1.0, 1.0, 0.0, True
        self.down = DownLabels("jsonl", cfg.node)

    async def poll(self, clock: Clock) -> Round:
        # the tail maps verl's keys to our names as it reads them (relabel.verl_key)
        batch = self.tail.poll(clock.now())
        seqlen_imbalance(batch)  # verl's own per-dp-rank load record -> one ratio (issue 33.6)
        if self.checkpoints is not None:
            self.checkpoints.observe_log(batch.samples)
            self.checkpoints.poll(clock.now(), batch)
        if self.export is not None:
            self.export.update(batch.samples)
        return Round([Polled(batch, source=self.metric)])

    async def close(self) -> None:
        self.tail.close()
        if self.checkpoints is not None:
            self.checkpoints.close()
