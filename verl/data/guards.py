"""Data reliability guards (article §2.3), each a small stateful object that goes into checkpoints:

- ``PromptClusters``: MinHash-LSH prompt clusters (datasketch) with a per-cluster cooldown on the
  injected clock, and near-duplicate removal for datasets.
- ``RewardGuard``: skip an update whose reward variance jumps ×``variance_jump`` over the recent
  batches or whose share of extreme rewards exceeds ``extreme_ratio``; keep the outlier prompts.
- ``RolloutValidator``: drop responses that are too long, carry illegal characters, or break the
  configured JSON Schema, counting each reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
from datasketch import MinHashLSH

from verl.fault.similarity import NUM_PERM, minhashes


class GuardConfigError(ValueError):
    """Bad guard configuration; the message is one line naming the key or file and the fix."""


class _WallClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


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
        clock: Any = None,
    ) -> None:
        if cooldown_minutes < 0:
            raise GuardConfigError(f"data.cooldown_minutes must be >= 0, got {cooldown_minutes}")
        self.cooldown_s = cooldown_minutes * 60.0
        self.dedup_enabled = dedup
        self.cluster_threshold, self.dedup_threshold, self.num_perm = cluster_threshold, dedup_threshold, num_perm
        self.clock = clock or _WallClock()
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


# ---------------------------------------------------------------------------------------- rewards
def _robust_var(values: np.ndarray) -> float:
    """Squared IQR-sigma (IQR / 1.349, the normal-consistent scale): it moves only when a quarter of the
    batch moves, so one or two wild rewards show up as extreme values, not as a variance jump. Below 8
    samples quartiles are too noisy and the plain variance is used."""
    if values.size < 8:
        return float(values.var()) if values.size else math.nan
    q1, q3 = np.percentile(values, [25, 75])
    return float(((q3 - q1) / 1.349) ** 2)


@dataclass(frozen=True)
class GuardVerdict:
    skip: bool
    reason: str | None  # "variance_jump" | "extreme_values" when skipped
    variance: float
    baseline_variance: float | None
    extreme_ratio: float


class RewardGuard:
    """Reward guard (article §2.3: variance ×3 or > 5 % extreme values pauses the batch).

    The reference is the last ``window`` accepted batches, so it follows a policy that is learning:
    rewards that widen or shift over tens of steps move the reference with them, while a reward model
    that breaks within a step does not. Spikes never enter it (only accepted batches do).

    - **Variance jump**: the batch's robust variance (``_robust_var``) exceeds ``variance_jump`` times the
      reference's typical batch (the median over the window, floored at ``min_std``²), *and* a
      Brown-Forsythe test (scipy's ``levene(center="median")``) against the pooled reference rejects
      equal spread at ``significance``. The test is what keeps 16-sample batches quiet: their spread
      alone swings ×3 by chance every few dozen steps. 1e-4 (was 1e-3): the policy's own wobbles on
      healthy ppo_tiny runs reached p = 1e-4..3e-4, a broken reward model's batches p < 1e-5.
    - **Extreme values**: non-finite, outside ``bounds`` when given, or farther than ``extreme_z``
      reference sigmas beyond the reference's central range (all but its ``tail``: the article's
      "top-1 %"; a quantile, so one stray reward accepted earlier does not widen it). The share must
      exceed ``extreme_ratio`` with at least ``min_extreme_count`` samples (one in 16 is already 6 %).
      3, not 2: once a policy's rewards saturate (all 1.0), its own occasional one or two misses in a
      16-answer batch are beyond the collapsed reference range; at 2 they paused healthy 600-step runs
      (2 of 1800 steps) and the soak, at 3 none, and three zeroed scores (the ``zeros3`` fault) are
      still caught 9 of 9 times. The cost: a reward model zeroing just two answers of 16 passes this test.

    ``benchmarks/reward_guard.py`` measures both sides: pauses on healthy ppo_tiny runs (false pauses)
    and injected reward-model faults caught (see ``benchmarks/RESULTS.md``).

    After ``max_consecutive_pauses`` skips in a row the shift is a new regime: the reference restarts
    from the next all-finite batch, so a guard can never stall training for good
    (batches with NaN/Inf rewards are always skipped).

    **Empty responses** (``responses`` given; empty after stripping whitespace) say nothing about the
    reward model: whatever it scores them is honest, and a policy that sometimes answers nothing is what
    the update should correct, not skip. Their rewards take no part in the variance test, the extreme
    share or the reference (a NaN reward still pauses). On healthy ppo_tiny runs these were most of the
    guard's false pauses: batches with two or three 0.0 rewards, each for an empty answer."""

    def __init__(
        self,
        *,
        variance_jump: float = 3.0,
        extreme_ratio: float = 0.05,
        extreme_z: float = 4.0,
        bounds: tuple[float, float] | None = None,
        warmup_batches: int = 3,
        window: int = 16,
        significance: float = 1e-4,
        tail: float = 0.01,
        min_std: float = 0.05,
        max_consecutive_pauses: int = 3,
        min_extreme_count: int = 3,
        top_k: int = 10,
        paused_counter: Any = None,
    ) -> None:
        if variance_jump <= 1.0:
            raise GuardConfigError(f"guard.variance_jump must be > 1, got {variance_jump}")
        if not 0.0 <= extreme_ratio < 1.0:
            raise GuardConfigError(f"guard.extreme_ratio must be in [0, 1), got {extreme_ratio}")
        if window < max(1, warmup_batches):
            raise GuardConfigError(f"guard.window must be >= the warm-up ({warmup_batches} batches), got {window}")
        self.variance_jump, self.extreme_ratio_limit, self.extreme_z = variance_jump, extreme_ratio, extreme_z
        self.bounds, self.warmup_batches, self.significance = bounds, warmup_batches, significance
        self.tail = tail
        self.min_var = min_std**2
        self.max_consecutive_pauses, self.top_k = max_consecutive_pauses, top_k
        self.min_extreme_count = min_extreme_count
        self._counter = paused_counter
        self._reference: deque[np.ndarray] = deque(maxlen=window)
        self.consecutive_pauses = 0
        self.paused: dict[str, int] = {}
        self._outliers: deque[dict[str, Any]] = deque(maxlen=200)

    @property
    def warmed(self) -> bool:
        return len(self._reference) >= self.warmup_batches

    def _extreme(self, rewards: np.ndarray, pooled: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(is extreme, anomaly score) per reward against the ``pooled`` reference (None while warming
        up). The score, |r - reference median| in reference sigmas (inf for non-finite or out-of-bounds),
        ranks ``outliers()``; extreme means farther than ``extreme_z`` sigmas beyond the reference's
        central range."""
        score = np.zeros(rewards.size)
        beyond = np.zeros(rewards.size)
        if pooled is not None:
            lo, q1, med, q3, hi = np.percentile(pooled, [100 * self.tail / 2, 25, 50, 75, 100 - 100 * self.tail / 2])
            sigma = max((q3 - q1) / 1.349, math.sqrt(self.min_var))
            with np.errstate(invalid="ignore"):
                score = np.abs(rewards - med) / sigma
                beyond = np.maximum(lo - rewards, rewards - hi).clip(min=0.0) / sigma
        bad = ~np.isfinite(rewards)
        if self.bounds is not None:
            with np.errstate(invalid="ignore"):
                bad |= (rewards < self.bounds[0]) | (rewards > self.bounds[1])
        return bad | (beyond > self.extreme_z), np.where(bad, np.inf, score)

    def _variance_jump(self, finite: np.ndarray, var: float, pooled: np.ndarray | None) -> tuple[bool, float | None]:
        if pooled is None or finite.size < 2:
            return False, None
        typical = max(float(np.median([_robust_var(b) for b in self._reference])), self.min_var)
        if var <= self.variance_jump * typical:
            return False, typical
        # imported here: scipy.stats costs ~1 s of every trainer start-up, and this test runs only on a
        # batch whose variance already jumped
        from scipy.stats import levene

        return bool(levene(finite, pooled, center="median").pvalue < self.significance), typical

    def check(self, rewards: Sequence[float], prompts: Sequence[str] | None = None, step: int | None = None,
              responses: Sequence[str] | None = None) -> GuardVerdict:
        """Judge one batch; ``skip`` means do not apply this update. ``responses`` (optional, aligned with
        ``rewards``) lets empty answers out of the judgement (see the class docstring)."""
        values = np.asarray([float(r) for r in rewards], dtype=np.float64)
        prompts = list(prompts) if prompts is not None else [""] * values.size
        empty = np.zeros(values.size, dtype=bool)
        if responses is not None and len(responses) == values.size:
            empty = np.asarray([not str(r).strip() for r in responses], dtype=bool)
        finite = values[np.isfinite(values)]
        judged = values[np.isfinite(values) & ~empty]
        var = _robust_var(judged)
        pooled = np.concatenate(self._reference) if self.warmed else None
        extreme, z = self._extreme(values, pooled)
        extreme &= ~(empty & np.isfinite(values))
        ratio = float(extreme.sum()) / max(1, int((~empty).sum()) or values.size)
        if pooled is not None or not np.isfinite(z).all():
            for p, r, zi in zip(prompts, values.tolist(), z.tolist(), strict=True):
                self._outliers.append({"prompt": p, "reward": r if math.isfinite(r) else str(r), "z": zi, "step": step})

        jump, baseline = self._variance_jump(judged, var, pooled)
        reason = None
        if finite.size < values.size:
            reason = "extreme_values"  # any NaN/Inf reward: never train on it, whatever the batch size
        elif jump:
            reason = "variance_jump"
        elif ratio > self.extreme_ratio_limit and extreme.sum() >= self.min_extreme_count:
            reason = "extreme_values"
        if reason is not None and self.consecutive_pauses >= self.max_consecutive_pauses and finite.size == values.size:
            self._reference.clear()  # a sustained shift is a new regime: re-baseline on it (never on NaN/Inf)
            reason = None
        if reason is not None:
            self.consecutive_pauses += 1
            self.paused[reason] = self.paused.get(reason, 0) + 1
            if self._counter is not None:
                self._counter.labels(reason=reason).inc()
            return GuardVerdict(True, reason, var, baseline, ratio)
        self.consecutive_pauses = 0
        if judged.size:
            self._reference.append(judged)
        return GuardVerdict(False, None, var, baseline, ratio)

    def restart_reference(self) -> None:
        """Forget the reference: the next batches warm it up again (a reward model that was down and
        answers again is a new regime; the policy trained on cached scores meanwhile)."""
        self._reference.clear()
        self.consecutive_pauses = 0

    def outliers(self, k: int | None = None) -> list[dict[str, Any]]:
        """The most anomalous of the last 200 judged rewards (largest score first), for
        ``/api/v1/reward_outliers``."""
        ranked = sorted(self._outliers, key=lambda o: (-o["z"], -(o["step"] or 0)))
        return [
            {**o, "z": o["z"] if math.isfinite(o["z"]) else "inf"} for o in ranked[: k or self.top_k]
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            "reference": [b.tolist() for b in self._reference],
            "consecutive_pauses": self.consecutive_pauses, "paused": dict(self.paused),
            "outliers": [{**o, "z": o["z"] if math.isfinite(o["z"]) else "inf"} for o in self._outliers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # a checkpoint of the older EMA guard has no "reference": the guard warms up again
        self._reference.clear()
        self._reference.extend(np.asarray(b, dtype=np.float64) for b in state.get("reference", []))
        self.consecutive_pauses = state["consecutive_pauses"]
        self.paused = dict(state["paused"])
        self._outliers.clear()
        for o in state.get("outliers", []):
            self._outliers.append({**o, "z": math.inf if o["z"] == "inf" else float(o["z"])})


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
