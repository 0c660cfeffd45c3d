"""What the trainer tells the metrics: one call per step, plus a sampler thread for slow-moving gauges.

A disabled sink ignores every call, so ``metrics.enabled=false`` measures the trainer without any metric
work (benchmarks/trainer_overhead.py compares the two).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from verl.metrics.data_quality import DataQualityAnalyzer
from verl.metrics.hardware import HardwareSampler
from verl.metrics.registry import MetricsRegistry
from verl.utils.clock import Clock


@dataclass
class StepStats:
    """Everything one PPO step reports (values are rank-averaged under torchrun)."""

    global_step: int
    reward_mean: float
    reward_std: float
    reward_extreme_ratio: float
    kl: float
    kl_coef: float
    entropy: float
    clip_fraction: float
    advantage_variance: float
    policy_loss: float
    critic_loss: float
    grad_norm: dict[str, float]
    layer_kl: list[float]
    stage_seconds: dict[str, float]
    tokens_per_second: float
    dataloader_wait_seconds: float
    step_seconds: float
    nonfinite: bool = False
    extra: dict[str, float] = field(default_factory=dict)


class TrainerMetrics:
    def __init__(self, metrics: MetricsRegistry, clock: Clock, enabled: bool = True,
                 prompt_analysis: str = "auto") -> None:
        self.metrics = metrics
        self.clock = clock
        self.enabled = enabled
        self.data = DataQualityAnalyzer(metrics, prompt_analysis=prompt_analysis, preload=enabled)

    def set_config_info(self, labels: dict[str, str]) -> None:
        self.metrics["verl_config_info"].info(labels)

    def init_layers(self, n_layers: int) -> None:
        self.metrics.init_labels("verl_layer_kl", "layer", (str(i) for i in range(n_layers)))

    def init_workers(self, n_workers: int) -> None:
        self.metrics.init_labels("verl_rollout_worker_cpu_ratio", "worker", (str(i) for i in range(n_workers)))

    def observe_step(self, s: StepStats) -> None:
        if not self.enabled:
            return
        m = self.metrics
        m["verl_global_step"].set(s.global_step)
        m["verl_heartbeat_timestamp_seconds"].set(self.clock.now())
        for name, value in (("verl_reward_mean", s.reward_mean), ("verl_reward_std", s.reward_std),
                            ("verl_reward_extreme_ratio", s.reward_extreme_ratio), ("verl_kl_divergence", s.kl),
                            ("verl_kl_coef", s.kl_coef), ("verl_entropy", s.entropy),
                            ("verl_clip_fraction", s.clip_fraction),
                            ("verl_advantage_variance", s.advantage_variance),
                            ("verl_policy_loss", s.policy_loss), ("verl_critic_loss", s.critic_loss),
                            ("verl_actor_tokens_per_second", s.tokens_per_second),
                            ("verl_dataloader_wait_seconds", s.dataloader_wait_seconds)):
            m[name].set(value)
        for model, norm in s.grad_norm.items():
            m["verl_grad_norm"].labels(model=model).set(norm)
        for layer, value in enumerate(s.layer_kl):
            m["verl_layer_kl"].labels(layer=str(layer)).set(value)
        for stage, seconds in s.stage_seconds.items():
            m["verl_stage_seconds"].labels(stage=stage).set(seconds)
        if s.nonfinite:
            m["verl_nonfinite_steps_total"].inc()

    def observe_buffer(self, size: int, oldest_age_s: float, evictions_delta: int) -> None:
        if not self.enabled:
            return
        self.metrics["verl_rollout_buffer_size"].labels(stage="train").set(size)
        self.metrics["verl_rollout_buffer_age_seconds"].set(oldest_age_s)
        if evictions_delta:
            self.metrics["verl_rollout_buffer_evictions_total"].inc(evictions_delta)

    def observe_samples(self, prompts: list[str], rewards: list[float], sample_ages: list[float]) -> None:
        if self.enabled:
            self.data.observe(prompts, rewards, sample_ages)

    def report_data_level(self) -> None:
        if self.enabled:
            self.data.report()

    def close(self) -> None:
        self.data.close()


class Sampler:
    """Background thread: hardware every ``hardware_interval_s``, framework callbacks every ``interval_s``.

    Runs on real time (it is only started next to a live endpoint); the training loop itself never
    waits for it.
    """

    def __init__(self, hardware: HardwareSampler, hardware_interval_s: float, interval_s: float,
                 framework: list[Callable[[], None]]) -> None:
        self.hardware = hardware
        self.hardware_interval_s = hardware_interval_s
        self.interval_s = interval_s
        self.framework = framework
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verl-metrics-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        tick = min(self.hardware_interval_s, self.interval_s)
        elapsed_hw = elapsed_fw = float("inf")  # sample immediately at start
        while True:
            if elapsed_hw >= self.hardware_interval_s:
                self.hardware.sample()
                elapsed_hw = 0.0
            if elapsed_fw >= self.interval_s:
                for refresh in self.framework:
                    refresh()
                elapsed_fw = 0.0
            if self._stop.wait(tick):
                return
            elapsed_hw += tick
            elapsed_fw += tick

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
