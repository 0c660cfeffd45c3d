"""Semantic cooldown clusters (``data.dedup_method: semantic``): ``PromptClusters`` whose prompts are
compared by meaning — the cosine of their sentence embeddings (``verl.data.embeddings``) — instead of
the Jaccard estimate of character shingles (the comparison hooks of PromptClusters), so "How do I bake sourdough?" and "What are the steps to make sourdough bread?"
share one cluster and one 30-minute cooldown. Candidates come from random-hyperplane LSH over the same
embeddings; the cooldown, the coolest-first fallback and the checkpointed state are PromptClusters'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl.data.embeddings import DIM, EmbeddingUnavailable, shared_embedder
from verl.data.guards import GuardConfigError, PromptClusters

# 20 bands of 6 sign bits: a pair at cosine 0.75 (the cluster threshold) shares a band with p ≈ 0.99,
# an unrelated pair (cosine ~0.1) with p ≈ 0.4 (then the exact cosine turns it away)
BANDS, ROWS = 20, 6
PLANE_SEED = 20_260_528  # fixed: the same prompts get the same clusters in every run and after a resume


class HyperplaneLSH:
    """Random-hyperplane LSH (sign of the projection on random normals, Charikar's SimHash), banded as
    datasketch's MinHashLSH bands MinHash signatures. Written here because datasketch hashes sets, not
    dense vectors, and faiss would be a large dependency for a dictionary of buckets."""

    def __init__(self, bands: int = BANDS, rows: int = ROWS, seed: int = PLANE_SEED) -> None:
        self.planes = np.random.default_rng(seed).standard_normal((bands * rows, DIM)).astype(np.float32)
        self.bands, self.rows = bands, rows
        self._weights = 1 << np.arange(rows)
        self._buckets: defaultdict[tuple[int, int], list[str]] = defaultdict(list)

    def _codes(self, vec: np.ndarray) -> list[int]:
        bits = (self.planes @ vec > 0).reshape(self.bands, self.rows)
        return [int(c) for c in bits @ self._weights]

    def insert(self, key: str, vec: np.ndarray) -> None:
        for band, code in enumerate(self._codes(vec)):
            self._buckets[(band, code)].append(key)

    def query(self, vec: np.ndarray) -> set[str]:
        return {k for band, code in enumerate(self._codes(vec)) for k in self._buckets.get((band, code), ())}


class SemanticClusters(PromptClusters):
    """Prompts whose embedding cosine reaches ``cluster_threshold`` share a cluster (with the nearest
    member, ties to the oldest cluster); ``dedup`` removes those at ``dedup_threshold`` or above.
    all-MiniLM-L6-v2 puts paraphrases of one question at cosine 0.8-0.9 and unrelated questions
    below 0.3, hence 0.75 / 0.95."""

    def __init__(self, *, cooldown_minutes: float = 30.0, dedup: bool = True, cluster_threshold: float = 0.75,
                 dedup_threshold: float = 0.95, clock: Any = None, embedder: Any = None) -> None:
        if not -1.0 <= cluster_threshold <= dedup_threshold <= 1.0:
            raise GuardConfigError("semantic cluster thresholds must satisfy -1 <= cluster <= dedup <= 1")
        try:
            # loaded here, at start-up: the batches' admissions must never wait for a model load
            self.embedder = embedder if embedder is not None else shared_embedder()
        except EmbeddingUnavailable as exc:
            raise GuardConfigError(f"data.dedup_method semantic: {exc}") from None
        self._dataset_vecs: dict[str, np.ndarray] = {}
        super().__init__(cooldown_minutes=cooldown_minutes, dedup=dedup, cluster_threshold=cluster_threshold,
                         dedup_threshold=dedup_threshold, clock=clock)

    def _signatures(self, texts: list[str]) -> Sequence[np.ndarray]:
        if all(t in self._dataset_vecs for t in texts):
            return [self._dataset_vecs[t] for t in texts]
        return self.embedder.embed(texts)

    def _similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b)  # unit vectors: the cosine

    def _new_index(self, threshold: float) -> HyperplaneLSH:
        return HyperplaneLSH()  # banded for the cluster threshold: pairs at the higher dedup threshold share a band surely

    def dedup(self, texts: Sequence[str]) -> list[int]:
        """PromptClusters.dedup by cosine, after embedding the whole dataset once, at start-up
        (``dedup=False`` too): the vectors are kept (1.5 KB a prompt), so no admission during training
        runs the model."""
        self._dataset_vecs.update(zip(texts, self.embedder.embed(list(texts)), strict=True))
        return super().dedup(texts)

DEDUP_METHODS = ("minhash", "semantic")


def prompt_clusters(method: str, *, cooldown_minutes: float = 30.0, clock: Any = None,
                    embedder: Any = None) -> PromptClusters:
    """The cooldown clusters of ``data.dedup_method``: lexical MinHash-LSH or semantic."""
    if method == "semantic":
        return SemanticClusters(cooldown_minutes=cooldown_minutes, clock=clock, embedder=embedder)
    if method == "minhash":
        return PromptClusters(cooldown_minutes=cooldown_minutes, clock=clock)
    raise GuardConfigError(f"data.dedup_method must be one of {', '.join(DEDUP_METHODS)}, got {method!r}")
