"""Data-level metrics (every ``metrics.data_interval_steps``, computed off the training thread).

- ``verl_prompt_diversity{method=...}``: with the semantic extra installed (``verl-ops[semantic]``,
  ``metrics.prompt_analysis`` auto or semantic), ``method="semantic"``: the mean pairwise cosine distance
  of the sentence embeddings of the last 256 prompts (why that and not a BERTScore-style matching:
  ``verl.metrics.prompt_semantics``). Otherwise, or when the model fails to
  load, ``method="lexical"``: distinct-2, the share of unique character bigrams among all bigrams of the
  recent prompts (1 = no repetition). The label always says which ran.
- ``verl_prompt_shift_pvalue``: permutation p-value of the MMD between the embeddings of the first 256
  prompts of the run (the reference, embedded once) and the last 256 (semantic only; 1 until 64
  prompts followed the reference, and always 1 without the extra); small = the prompt distribution
  moved. A report embeds at most those 256 recent prompts (cached by text: repeats cost nothing).
- ``verl_reward_shift_ks_pvalue``: two-sample Kolmogorov-Smirnov p-value of the recent reward window
  against the first window seen (the reference); small = the reward distribution moved.
- ``verl_buffer_sample_age_seconds``: mean age of the samples trained on since the last report.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verl.data.embeddings import EmbeddingUnavailable, semantic_available, shared_embedder
from verl.metrics.registry import MetricsRegistry

log = logging.getLogger("verl.metrics")

SHIFT_WINDOW = 256  # prompts in the reference and in the recent window: bounds a report's embedding work
MIN_RECENT = 64  # fewer prompts after the reference than this: no shift test yet (p stays 1)


def distinct_n(texts: list[str], n: int = 2) -> float:
    grams = [t[i:i + n] for t in texts for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def wants_semantic(prompt_analysis: str) -> bool:
    """auto: semantic when the extra is installed; the config check refuses semantic without it."""
    return prompt_analysis == "semantic" or (prompt_analysis == "auto" and semantic_available())


def _ks_pvalue(reference: list[float], rewards: list[float]) -> float:
    """Two-sample KS p-value; 1 exactly for the same sample, which is every run's first report (its window
    is the reference): scipy.stats is then not imported at all, ~0.5 CPU-s of every short run."""
    if sorted(reference) == sorted(rewards):
        return 1.0
    # imported here, on the report thread: scipy.stats is ~1 s of the trainer's start-up otherwise
    from scipy.stats import ks_2samp

    return float(ks_2samp(reference, rewards).pvalue)


class DataQualityAnalyzer:
    def __init__(self, metrics: MetricsRegistry, window: int = 2048, prompt_analysis: str = "auto",
                 embedder: Callable[[], Any] = shared_embedder, preload: bool = False) -> None:
        """``preload``: start loading the embedding model now, on the metrics thread, so the first
        report (step 1) finds it ready instead of waiting seconds for it."""
        self.metrics = metrics
        self.prompts: deque[str] = deque(maxlen=window)
        self.rewards: deque[float] = deque(maxlen=window)
        self.reference: list[float] | None = None
        self.ages: list[float] = []
        self.semantic = wants_semantic(prompt_analysis)
        self._embedder_factory = embedder
        self._embedder: Any = None
        self.reference_prompts: list[str] = []
        self.recent_prompts: deque[str] = deque(maxlen=SHIFT_WINDOW)
        self.after_reference = 0
        """Prompts observed since the reference window filled."""
        self._reference_vectors: Any = None
        self.method: str | None = None
        """The method of the last diversity reading ("semantic" | "lexical")."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl-data-metrics")
        self._pending: Future | None = None
        if self.semantic and preload:
            self._pool.submit(self._load_embedder)  # reports queue behind it on the one worker

    def observe(self, prompts: list[str], rewards: list[float], sample_ages: list[float]) -> None:
        self.prompts.extend(prompts)
        self.rewards.extend(rewards)
        self.ages.extend(sample_ages)
        if self.semantic:
            room = SHIFT_WINDOW - len(self.reference_prompts)
            self.reference_prompts.extend(prompts[:room])
            self.after_reference += len(prompts[room:])
            self.recent_prompts.extend(prompts)

    def report(self) -> Future | None:
        """Snapshot and compute in the background; a report still running is not queued twice (None)."""
        if self._pending is not None and not self._pending.done():
            return None
        prompts, rewards, ages = list(self.prompts), list(self.rewards), self.ages
        self.ages = []
        if self.reference is None:
            self.reference = rewards
        self._pending = self._pool.submit(self._compute, prompts, rewards, list(self.reference), ages,
                                          list(self.recent_prompts), self.after_reference >= MIN_RECENT)
        return self._pending

    def _compute(self, prompts: list[str], rewards: list[float], reference: list[float], ages: list[float],
                 recent: list[str], test_shift: bool) -> None:
        if not (self.semantic and self._semantic_report(recent, test_shift)):
            self._set_diversity("lexical", distinct_n(prompts))
        if len(rewards) >= 2 and len(reference) >= 2:
            self.metrics["verl_reward_shift_ks_pvalue"].set(_ks_pvalue(reference, rewards))
        if ages:
            self.metrics["verl_buffer_sample_age_seconds"].set(sum(ages) / len(ages))

    def _semantic_report(self, recent: list[str], test_shift: bool) -> bool:
        """Diversity and shift from embeddings; False (lexical this time) when none can be had."""
        from verl.metrics.prompt_semantics import mean_pairwise_distance, mmd_permutation_pvalue

        if not recent or not self._load_embedder():
            return False
        try:
            vectors = self._embedder.embed(recent)
            self._set_diversity("semantic", mean_pairwise_distance(vectors))
            if test_shift:
                if self._reference_vectors is None:  # the reference never changes: embedded once
                    self._reference_vectors = self._embedder.embed(self.reference_prompts)
                p = mmd_permutation_pvalue(self._reference_vectors, vectors)
                self.metrics["verl_prompt_shift_pvalue"].set(p)
            return True
        except (RuntimeError, OSError, ValueError) as exc:
            self._give_up(exc)
            return False

    def _load_embedder(self) -> bool:
        """The one model load, on the metrics thread; False when it cannot be had."""
        if self._embedder is None and self.semantic:
            try:
                self._embedder = self._embedder_factory()
            except (EmbeddingUnavailable, RuntimeError, OSError, ValueError) as exc:
                self._give_up(exc)
        return self._embedder is not None and self.semantic

    def _give_up(self, exc: Exception) -> None:
        # the loop carries on: lexical from now on, said once
        log.warning("semantic prompt analysis off, lexical diversity instead: %s", exc)
        self.semantic = False
        self.metrics["verl_prompt_shift_pvalue"].set(1.0)  # no test any more: no evidence, not a stale one

    def _set_diversity(self, method: str, value: float) -> None:
        gauge = self.metrics["verl_prompt_diversity"]
        if self.method is not None and self.method != method:
            gauge.remove(self.method)  # one method label at a time: a dashboard must not mix readings
        gauge.labels(method=method).set(value)
        self.method = method

    def close(self) -> None:
        self._pool.shutdown(wait=True)
