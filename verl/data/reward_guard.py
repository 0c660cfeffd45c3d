"""Reward guard: skip an update whose reward variance jumps ×``variance_jump`` over the recent batches or
whose share of extreme rewards exceeds ``extreme_ratio``; keep the outlier prompts. A small stateful object
that goes into checkpoints, like the guards of ``verl.data.guards``."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl.data.guards import GuardConfigError


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
    """Reward guard: a batch whose reward variance jumps ×3 or with > 5 % extreme values is paused.

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
