"""Every catalogue metric (``catalog.CATALOG``) as a prometheus_client object in its own registry.

Label values known up front are pre-initialised so that a live scrape shows the whole catalogue from the
first step (a counter that has never fired reads 0, which is the truth). GPU series are the exception:
they only exist when a GPU does (absent, not zero).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase

from verl.metrics.catalog import CATALOG, STAGES, MetricSpec

# Bounded label values known before training starts.
KNOWN_LABELS: dict[str, dict[str, tuple[str, ...]]] = {
    "verl_stage_seconds": {"stage": STAGES},
    "verl_rollout_buffer_size": {"stage": ("train",)},
    # the reasons of verl.data.guards.RolloutValidator
    "verl_rollout_samples_dropped_total": {"reason": ("too_long", "illegal_chars", "invalid_json", "schema_violation")},
    "verl_reward_model_calls_total": {"outcome": ("ok", "timeout", "error", "oom", "cached")},
    "verl_oom_events_total": {"component": ("actor", "critic", "reward")},
    "verl_degraded_mode": {"component": ("actor", "critic")},
    "verl_grad_norm": {"model": ("actor", "critic")},
    "verl_batches_paused_total": {"reason": ("variance_jump", "extreme_ratio", "nonfinite_reward")},
    "verl_updates_skipped_total": {"reason": ("cached_rewards",)},
}


# Gauges whose 0 would be a false reading before the first measurement.
INITIAL_VALUES: dict[str, float] = {
    # p = 1, no evidence of a shift, until the first KS (MMD) test: 0 would read as "certainly shifted", and NaN
    # is dropped by scrapers as a bad sample
    "verl_reward_shift_ks_pvalue": 1.0,
    "verl_prompt_shift_pvalue": 1.0,
}


class MetricsRegistry:
    """Name -> prometheus_client metric, built from the catalogue and nothing else."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.metrics: dict[str, MetricWrapperBase] = {spec.name: _build(spec, self.registry) for spec in CATALOG}
        for name, labels in KNOWN_LABELS.items():
            (label,) = labels
            for value in labels[label]:
                self.metrics[name].labels(**{label: value})
        for name, value in INITIAL_VALUES.items():
            self.metrics[name].set(value)

    def __getitem__(self, name: str) -> MetricWrapperBase:
        return self.metrics[name]

    def init_labels(self, name: str, label: str, values: Iterable[str]) -> None:
        for value in values:
            self.metrics[name].labels(**{label: value})


def _build(spec: MetricSpec, registry: CollectorRegistry) -> MetricWrapperBase:
    kwargs = {"name": spec.base_name, "documentation": spec.help, "registry": registry}
    if spec.kind == "info":
        return Info(**kwargs)  # labels are the info's keys, set at start
    cls = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}[spec.kind]
    return cls(labelnames=spec.labels, **kwargs)
