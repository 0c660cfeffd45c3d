"""The trainer's telemetry: the catalogue's metrics (``verl.metrics.catalog``) of each step, the /metrics +
/health endpoint on each node's local rank 0 with its hardware sampler, the reward outlier book, and the
terminal progress line."""

from __future__ import annotations

import logging
import math
import socket
import sys
from collections.abc import Callable
from typing import Any

from verl.config import Config
from verl.data.buffer import Rollout, RolloutBuffer
from verl.metrics.catalog import STAGES
from verl.metrics.hardware import HardwareSampler
from verl.metrics.outliers import OutlierBook, RewardRecord
from verl.metrics.registry import MetricsRegistry
from verl.metrics.server import MetricsServer
from verl.metrics.sink import Sampler, StepStats, TrainerMetrics
from verl.models.loading import model_label
from verl.trainer.distributed import DistContext, gather_objects, gather_rows
from verl.utils.clock import Clock

log = logging.getLogger("verl.trainer")


class Telemetry:
    def __init__(self, cfg: Config, ctx: DistContext, registry: MetricsRegistry, clock: Clock, buffer: RolloutBuffer,
                 n_layers: int) -> None:
        self.config, self.ctx, self.registry, self.clock, self.buffer = cfg, ctx, registry, clock, buffer
        self.metrics = TrainerMetrics(registry, clock, enabled=cfg.metrics.enabled,
                                      prompt_analysis=cfg.metrics.prompt_analysis)
        self.outliers = OutlierBook()
        self.hardware = HardwareSampler(registry)
        self.metrics.set_config_info(self.config_info())
        self.metrics.init_layers(n_layers)
        self.metrics.init_workers(max(1, cfg.rollout_worker_num))  # the in-process engine is worker "0"
        if cfg.metrics.enabled and not cfg.rollout_worker_num:  # the in-process engine: one always-alive worker
            registry["verl_rollout_workers_alive"].set(1)
        self.server: MetricsServer | None = None
        self.sampler: Sampler | None = None
        self._tty = sys.stderr.isatty()
        self._rank_nodes: list[str] | None = None

    def config_info(self) -> dict[str, str]:
        cfg = self.config
        return {
            "node": socket.gethostname(), "gpu_model": self.hardware.gpu_model, "model": model_label(cfg.actor.model),
            "kl_coef": str(cfg.kl_coef), "reward_batch_size": str(cfg.reward_batch_size),
            "rollout_worker_num": str(cfg.rollout_worker_num),
            "rollout_buffer_max_size": str(cfg.rollout_buffer_max_size),
            "rollout_buffer_eviction_policy": cfg.rollout_buffer_eviction_policy,
            "data_num_workers": str(cfg.data.num_workers),
            "data_persistent_workers": str(cfg.data.persistent_workers).lower(),
            "data_pin_memory": str(cfg.data.pin_memory).lower(),
            "offload_reward_to_cpu": str(cfg.offload_reward_to_cpu).lower(),
        }

    def start_server(self, health: Callable[[], dict[str, Any]], host: str | None, port: int | None) -> str | None:
        """Serve /metrics on this node's local rank 0; returns the URL (None on other ranks)."""
        host = host or self.config.metrics.host
        port = self.config.metrics.port if port is None else port
        if port is None or not self.ctx.is_node_main:
            return None
        self.server = MetricsServer(self.registry.registry, host, port, health, lambda k: self.outliers.top(k),
                                    api_token=self.config.metrics.api_token)
        self.sampler = Sampler(self.hardware, self.config.metrics.hardware_interval_s, self.config.metrics.interval_s,
                               [self._refresh_framework])
        self.sampler.start()
        return self.server.url

    @property
    def url(self) -> str | None:
        return self.server.url if self.server else None

    def _refresh_framework(self) -> None:
        self.metrics.observe_buffer(len(self.buffer), self.buffer.oldest_age(self.clock.now()), 0)

    def observe(self, stats: StepStats, rollouts: list[Rollout], now: float, evicted: int) -> None:
        if not self.config.metrics.enabled:
            return
        self.outliers.record([RewardRecord(stats.global_step, r.prompt_id, r.prompt, r.response, float(r.reward or 0))
                              for r in rollouts])
        self.metrics.observe_step(stats)
        self.metrics.observe_buffer(len(self.buffer), self.buffer.oldest_age(now), evicted)
        self.metrics.observe_samples([r.prompt for r in rollouts], [float(r.reward or 0) for r in rollouts],
                                     [max(0.0, now - r.created_at) for r in rollouts])
        if stats.global_step == 1 or stats.global_step % self.config.metrics.data_interval_steps == 0:
            self.metrics.report_data_level()

    def observe_ranks(self, step_seconds: float, stage_seconds: dict[str, float],
                      stage_waiting: dict[str, float] | None = None) -> None:
        """Every rank's step and stage times, exported by global rank 0 as ``verl_rank_step_seconds`` /
        ``verl_rank_stage_seconds{rank,node,stage}``, each stage split into the time blocked in collectives
        (``verl_rank_stage_wait_seconds``) and the rest (``verl_rank_stage_compute_seconds``): a collective
        makes the fast ranks wait for the slow one inside it, so only the compute part tells them apart
        (the monitor scores stragglers on it).

        Gathered, not served by each rank: one ``all_gather`` of 21 floats per rank per step costs nothing
        beside the step's own collectives, gives one coherent vector per step on one endpoint (the monitor
        compares peers of the same step), and needs no port per rank. A collective: every rank calls it."""
        if not self.config.metrics.enabled:
            return
        waiting = stage_waiting or {}
        rows = gather_rows([step_seconds, *(stage_seconds.get(s, math.nan) for s in STAGES),
                            *(waiting.get(s, math.nan) for s in STAGES)], self.ctx)
        if self._rank_nodes is None:  # once: the host of each rank
            self._rank_nodes = [str(h) for h in gather_objects(socket.gethostname(), self.ctx)]
        if not self.ctx.is_main:
            return
        n = len(STAGES)
        for rank, (row, node) in enumerate(zip(rows, self._rank_nodes, strict=True)):
            self.registry["verl_rank_step_seconds"].labels(rank=str(rank), node=node).set(row[0])
            for stage, seconds, wait in zip(STAGES, row[1:n + 1], row[n + 1:], strict=True):
                if math.isnan(seconds):  # a stage this step skipped keeps its last time
                    continue
                labels = {"rank": str(rank), "node": node, "stage": stage}
                self.registry["verl_rank_stage_seconds"].labels(**labels).set(seconds)
                if not math.isnan(wait):
                    self.registry["verl_rank_stage_wait_seconds"].labels(**labels).set(wait)
                    self.registry["verl_rank_stage_compute_seconds"].labels(**labels).set(max(0.0, seconds - wait))

    def report(self, s: StepStats) -> None:
        if not self.ctx.is_main:
            return
        total = self.config.trainer.total_steps
        line = (f"step {s.global_step}/{total} | reward {s.reward_mean:.3f} | kl {s.kl:.4f} | "
                f"{s.tokens_per_second:,.0f} tok/s")
        if self._tty:
            sys.stderr.write("\r" + line.ljust(80))
            sys.stderr.flush()
        elif s.global_step % self.config.trainer.log_interval == 0 or s.global_step == total:
            log.info("%s | pg_loss %.4f | vf_loss %.4f | clipfrac %.3f | entropy %.3f", line, s.policy_loss,
                     s.critic_loss, s.clip_fraction, s.entropy)

    def end_progress_line(self) -> None:
        if self._tty and self.ctx.is_main:
            sys.stderr.write("\n")

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()
        if self.server:
            self.server.close()
        self.metrics.close()
