"""Data reliability guards on the way in, each a small stateful object that goes into checkpoints:

- ``PromptClusters``: MinHash-LSH prompt clusters (datasketch) with a per-cluster cooldown on the
  injected clock, and near-duplicate removal for datasets.
- ``RolloutValidator``: drop responses that are too long, carry illegal characters, or break the
  configured JSON Schema, counting each reason.

The guard on the rewards that come back is ``verl.data.reward_guard.RewardGuard``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from datasketch import MinHashLSH

from verl.config.errors import TrainerConfigError
from verl.fault.similarity import NUM_PERM, minhashes
from verl.utils.clock import Clock, SystemClock


class GuardConfigError(TrainerConfigError):
    """Bad guard configuration; the message is one line naming the key or file and the fix."""


def _norm_key(text: str) -> str:
    return hashlib.sha1(" ".join(text.lower().split()).encode("utf-8", "surrogatepass")).hexdigest()


# ---------------------------------------------------------------------------------------- prompts
@dataclass(frozen=True)
class Admission:
    admitted: bool
    cluster: int
    reason: str | None = None  # "cooldown" when refused


class PromptClusters:
    """Prompts whose MinHash Jaccard estimate reaches ``cluster_threshold`` share a cluster; a cluster
    that supplied a prompt is cooled down for ``cooldown_minutes`` (on ``clock``), so the policy does
    not keep training on near-identical prompts. Deterministic: ties go to the oldest cluster."""

    def __init__(
        self,
        *,
        cooldown_minutes: float = 30.0,
        dedup: bool = True,
        cluster_threshold: float = 0.7,
        dedup_threshold: float = 0.9,
        num_perm: int = NUM_PERM,
        clock: Clock | None = None,
    ) -> None:
        if cooldown_minutes < 0:
            raise GuardConfigError(f"data.cooldown_minutes must be >= 0, got {cooldown_minutes}")
        self.cooldown_s = cooldown_minutes * 60.0
        self.dedup_enabled = dedup
        self.cluster_threshold, self.dedup_threshold, self.num_perm = cluster_threshold, dedup_threshold, num_perm
        self.clock = clock or SystemClock()
        self._reset()

    # How prompts are compared; verl.data.semantic_clusters overrides these three with sentence embeddings.
    def _signatures(self, texts: list[str]) -> Sequence[Any]:
        return minhashes(texts, self.num_perm)

    def _similarity(self, a: Any, b: Any) -> float:
        return a.jaccard(b)

    def _new_index(self, threshold: float) -> Any:
        """An LSH index (``insert(key, sig)``, ``query(sig)``) proposing candidates near ``threshold``."""
        return MinHashLSH(threshold=threshold, num_perm=self.num_perm)

    def _reset(self) -> None:
        self._lsh = self._new_index(self.cluster_threshold)
        self._sig: dict[str, Any] = {}
        self._cluster: dict[str, int] = {}  # normalised-text key -> cluster id
        self._texts: list[str] = []  # insertion order, for state_dict
        self._last_used: dict[int, float] = {}
        self._next_cluster = 0

    def __len__(self) -> int:
        return self._next_cluster

    def _nearest(self, sig: Any) -> tuple[str | None, float]:
        best, best_sim = None, -math.inf
        for key in sorted(self._lsh.query(sig), key=lambda k: self._cluster[k]):
            sim = self._similarity(sig, self._sig[key])
            if sim > best_sim:
                best, best_sim = key, sim
        return best, best_sim

    def _insert(self, texts: Sequence[str]) -> list[int]:
        new = [(t, _norm_key(t)) for t in texts]
        todo = [(t, k) for t, k in new if k not in self._cluster]
        for (text, key), sig in zip(todo, self._signatures([t for t, _ in todo]), strict=True):
            if key in self._cluster:  # a repeat within this batch
                continue
            near, sim = self._nearest(sig)
            if near is not None and sim >= self.cluster_threshold:
                self._cluster[key] = self._cluster[near]
            else:
                self._cluster[key] = self._next_cluster
                self._next_cluster += 1
            self._lsh.insert(key, sig)
            self._sig[key] = sig
            self._texts.append(text)
        return [self._cluster[k] for _, k in new]

    def cluster_of(self, text: str) -> int:
        return self._insert([text])[0]

    def dedup(self, texts: Sequence[str]) -> list[int]:
        """Indices of ``texts`` to keep: the first of every group of exact or near duplicates
        (similarity, here the Jaccard estimate, ≥ ``dedup_threshold``). With ``dedup=False`` all indices."""
        if not self.dedup_enabled:
            return list(range(len(texts)))
        lsh = self._new_index(self.dedup_threshold)
        kept_sigs: dict[str, Any] = {}
        keep: list[int] = []
        for i, (text, sig) in enumerate(zip(texts, self._signatures(list(texts)), strict=True)):
            key = _norm_key(text)
            # LSH only proposes candidates; the similarity decides
            if key in kept_sigs or any(self._similarity(sig, kept_sigs[k]) >= self.dedup_threshold
                                       for k in lsh.query(sig)):
                continue
            lsh.insert(key, sig)
            kept_sigs[key] = sig
            keep.append(i)
        return keep

    def admit(self, text: str) -> Admission:
        """Admit ``text`` unless its cluster supplied a prompt less than the cooldown ago; an admitted
        prompt starts its cluster's cooldown now."""
        cluster = self.cluster_of(text)
        now = self.clock.now()
        last = self._last_used.get(cluster)
        if last is not None and now - last < self.cooldown_s:
            return Admission(False, cluster, "cooldown")
        self._last_used[cluster] = now
        return Admission(True, cluster)

    def cooled_for(self, text: str) -> float:
        """Seconds since the prompt's cluster was last used (inf if never): lets a loader that finds
        nothing admissible pick the coolest cluster instead of starving."""
        last = self._last_used.get(self.cluster_of(text))
        return math.inf if last is None else self.clock.now() - last

    def state_dict(self) -> dict[str, Any]:
        return {
            "texts": list(self._texts),
            "last_used": {str(c): t for c, t in self._last_used.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Re-inserting the texts in their original order reproduces the same cluster ids."""
        self._reset()
        self._insert(state["texts"])
        self._last_used = {int(c): float(t) for c, t in state["last_used"].items()}


# ---------------------------------------------------------------------------------------- rollouts
# NUL and other C0 controls except tab/newline/CR, DEL, lone surrogates (undecodable bytes that
# leaked through "surrogateescape") and the two Unicode non-characters.
ILLEGAL_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


class RolloutValidator:
    """Length is counted by ``num_tokens`` passed to ``check`` (the trainer knows its token ids), else
    by ``count_tokens(text)``, else in UTF-8 bytes (what a byte-level tokenizer would count)."""

    REASONS = ("too_long", "illegal_chars", "invalid_json", "schema_violation")

    def __init__(
        self,
        *,
        max_response_tokens: int = 512,
        response_schema: str | Path | dict[str, Any] | None = None,
        count_tokens: Any = None,
        dropped_counter: Any = None,
    ) -> None:
        if max_response_tokens < 1:
            raise GuardConfigError(f"data.max_response_tokens must be >= 1, got {max_response_tokens}")
        self.max_tokens = max_response_tokens
        self.count_tokens = count_tokens
        self._counter = dropped_counter
        self.dropped: dict[str, int] = {}
        self._validator = _load_schema(response_schema) if response_schema is not None else None

    def check(self, response: str, num_tokens: int | None = None) -> str | None:
        """The drop reason for one response, or ``None`` when it is valid."""
        if num_tokens is None:
            num_tokens = self.count_tokens(response) if self.count_tokens else len(response.encode("utf-8", "surrogatepass"))
        if num_tokens > self.max_tokens:
            return "too_long"
        if ILLEGAL_CHARS.search(response):
            return "illegal_chars"
        if self._validator is not None:
            try:
                doc = json.loads(response)
            except ValueError:
                return "invalid_json"
            if not self._validator.is_valid(doc):
                return "schema_violation"
        return None

    def filter(self, responses: Sequence[str], num_tokens: Sequence[int] | None = None) -> list[int]:
        """Indices of the valid responses; every drop is counted by reason."""
        keep = []
        for i, text in enumerate(responses):
            reason = self.check(text, num_tokens[i] if num_tokens is not None else None)
            if reason is None:
                keep.append(i)
                continue
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            if self._counter is not None:
                self._counter.labels(reason=reason).inc()
        return keep

    def state_dict(self) -> dict[str, Any]:
        return {"dropped": dict(self.dropped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dropped = dict(state["dropped"])


def _load_schema(schema: str | Path | dict[str, Any]) -> Any:
    where = "data.response_schema"
    if not isinstance(schema, dict):
        where = str(schema)
        try:
            schema = json.loads(Path(schema).read_text(encoding="utf-8"))
        except OSError as exc:
            raise GuardConfigError(f"data.response_schema: cannot read {where}: {exc.strerror}; fix the path or set it to null") from None
        except ValueError as exc:
            raise GuardConfigError(f"data.response_schema: {where} is not valid JSON ({exc}); fix the file") from None
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise GuardConfigError(f"data.response_schema: {where} is not a valid JSON Schema ({exc.message})") from None
    return cls(schema)
