"""Data-level metrics (every ``metrics.data_interval_steps``, computed off the training thread).

- ``verl_prompt_diversity{method="lexical"}``: distinct-2, the share of unique character bigrams among all
  bigrams of the recent prompts (1 = no repetition). The semantic variant (embedding distance) needs a
  local sentence-embedding model; none ships here, so the label says "lexical".
- ``verl_reward_shift_ks_pvalue``: two-sample Kolmogorov-Smirnov p-value of the recent reward window
  against the first window seen (the reference); small = the reward distribution moved.
- ``verl_buffer_sample_age_seconds``: mean age of the samples trained on since the last report.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from verl.metrics.registry import MetricsRegistry


def distinct_n(texts: list[str], n: int = 2) -> float:
    grams = [t[i:i + n] for t in texts for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


class DataQualityAnalyzer:
    def __init__(self, metrics: MetricsRegistry, window: int = 2048) -> None:
        self.metrics = metrics
        self.prompts: deque[str] = deque(maxlen=window)
        self.rewards: deque[float] = deque(maxlen=window)
        self.reference: list[float] | None = None
        self.ages: list[float] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl-data-metrics")
        self._pending: Future | None = None

    def observe(self, prompts: list[str], rewards: list[float], sample_ages: list[float]) -> None:
        self.prompts.extend(prompts)
        self.rewards.extend(rewards)
        self.ages.extend(sample_ages)

    def report(self) -> None:
        """Snapshot and compute in the background; a report still running is not queued twice."""
        if self._pending is not None and not self._pending.done():
            return
        prompts, rewards, ages = list(self.prompts), list(self.rewards), self.ages
        self.ages = []
        if self.reference is None:
            self.reference = rewards
        self._pending = self._pool.submit(self._compute, prompts, rewards, list(self.reference), ages)

    def _compute(self, prompts: list[str], rewards: list[float], reference: list[float], ages: list[float]) -> None:
        self.metrics["verl_prompt_diversity"].labels(method="lexical").set(distinct_n(prompts))
        if len(rewards) >= 2 and len(reference) >= 2:
            # imported here, on the report thread: scipy.stats is ~1 s of the trainer's start-up otherwise
            from scipy.stats import ks_2samp

            self.metrics["verl_reward_shift_ks_pvalue"].set(float(ks_2samp(reference, rewards).pvalue))
        if ages:
            self.metrics["verl_buffer_sample_age_seconds"].set(sum(ages) / len(ages))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
