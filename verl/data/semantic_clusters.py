"""Semantic cooldown clusters (``data.dedup_method: semantic``): ``PromptClusters`` whose prompts are
compared by meaning — the cosine of their sentence embeddings (``verl.data.embeddings``) — instead of
character shingles, so "How do I bake sourdough?" and "What are the steps to make sourdough bread?"
share one cluster and one 30-minute cooldown. Candidates come from random-hyperplane LSH over the same
embeddings; the cooldown, the coolest-first fallback and the checkpointed state are PromptClusters'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl.data.embeddings import DIM, EmbeddingUnavailable, shared_embedder
from verl.data.guards import GuardConfigError, PromptClusters, _norm_key

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

    def _reset(self) -> None:
        self._index = HyperplaneLSH()
        self._vec: dict[str, np.ndarray] = {}
        self._cluster: dict[str, int] = {}
        self._texts: list[str] = []
        self._last_used: dict[int, float] = {}
        self._next_cluster = 0

    def _nearest_vec(self, vec: np.ndarray) -> tuple[str | None, float]:
        best, best_sim = None, -2.0
        for key in sorted(self._index.query(vec), key=lambda k: self._cluster[k]):
            sim = float(vec @ self._vec[key])
            if sim > best_sim:
                best, best_sim = key, sim
        return best, best_sim

    def _insert(self, texts: Sequence[str]) -> list[int]:
        new = [(t, _norm_key(t)) for t in texts]
        todo = [(t, k) for t, k in new if k not in self._cluster]
        vecs = self._embed([t for t, _ in todo])
        for (text, key), vec in zip(todo, vecs, strict=True):
            if key in self._cluster:  # a repeat within this batch
                continue
            near, sim = self._nearest_vec(vec)
            if near is not None and sim >= self.cluster_threshold:
                self._cluster[key] = self._cluster[near]
            else:
                self._cluster[key] = self._next_cluster
                self._next_cluster += 1
            self._index.insert(key, vec)
            self._vec[key] = vec
            self._texts.append(text)
        return [self._cluster[k] for _, k in new]

    def _embed(self, texts: list[str]) -> np.ndarray | list[np.ndarray]:
        if all(t in self._dataset_vecs for t in texts):
            return [self._dataset_vecs[t] for t in texts]
        return self.embedder.embed(texts)

    def dedup(self, texts: Sequence[str]) -> list[int]:
        """Indices of ``texts`` to keep: the first of every group whose cosine reaches ``dedup_threshold``.
        Embeds the whole dataset once, at start-up (``dedup=False`` too), and keeps the vectors (1.5 KB a
        prompt), so no admission during training runs the model."""
        vecs = self.embedder.embed(list(texts))
        self._dataset_vecs.update(zip(texts, vecs, strict=True))
        if not self.dedup_enabled:
            return list(range(len(texts)))
        index, kept, keep = HyperplaneLSH(), {}, []
        for i, (text, vec) in enumerate(zip(texts, vecs, strict=True)):
            key = _norm_key(text)
            if key in kept or any(float(vec @ kept[k]) >= self.dedup_threshold for k in index.query(vec)):
                continue
            index.insert(key, vec)
            kept[key] = vec
            keep.append(i)
        return keep


DEDUP_METHODS = ("minhash", "semantic")


def prompt_clusters(method: str, *, cooldown_minutes: float = 30.0, clock: Any = None,
                    embedder: Any = None) -> PromptClusters:
    """The cooldown clusters of ``data.dedup_method``: lexical MinHash-LSH or semantic."""
    if method == "semantic":
        return SemanticClusters(cooldown_minutes=cooldown_minutes, clock=clock, embedder=embedder)
    if method == "minhash":
        return PromptClusters(cooldown_minutes=cooldown_minutes, clock=clock)
    raise GuardConfigError(f"data.dedup_method must be one of {', '.join(DEDUP_METHODS)}, got {method!r}")
