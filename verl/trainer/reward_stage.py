"""The reward stage of a PPO step, between generation and the updates:

    validate -> score (circuit breaker) -> buffer put [reward OOM: shed the backlog] -> take the batch
             -> reward guard over the rewards of ALL ranks -> pause decision all-reduced

Invalid rollouts stay in the batch as masked rows (never scored, zero loss weight): every rank must run
the same number of micro-batches, or DDP waits forever. For the same reason the guard judges the gathered
rewards (identical on every rank) and the skip flag is all-reduced.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from verl.config import Config
from verl.data.buffer import Rollout, RolloutBuffer
from verl.data.reward_guard import GuardVerdict
from verl.fault.circuit_breaker import CircuitState
from verl.metrics.registry import MetricsRegistry
from verl.trainer.distributed import DistContext, any_across_ranks, gather_objects
from verl.trainer.guards import DataGuards, RewardPath, pause_label
from verl.utils.clock import Clock

log = logging.getLogger(__name__)


@dataclass
class ScoredBatch:
    """The reward stage's output, passed forward to the updates."""

    batch: list[Rollout]      # the training batch of this rank (invalid rows included; masked in collate)
    valid: list[Rollout]      # its rows that passed rollout validation
    scores: list[float]       # rewards of the valid rows of ALL ranks (identical on every rank)
    verdict: GuardVerdict
    pause: bool               # skip this update (the guard's verdict, all-reduced)
    evicted: int
    taken_at: float
    cached_only: bool = False  # every score of ALL ranks came from the breaker's cache: no reward signal


class RewardStage:
    """``reward`` is the trainer's seam: the circuit breaker by default, or any ``.score(texts)`` object
    plugged in (then this stage counts ``outcome="ok"`` itself; the breaker counts its own outcomes)."""

    def __init__(self, config: Config, path: RewardPath, guards: DataGuards, buffer: RolloutBuffer,
                 registry: MetricsRegistry, clock: Clock, ctx: DistContext) -> None:
        self.config, self.path, self.guards, self.buffer = config, path, guards, buffer
        self.registry, self.clock, self.ctx = registry, clock, ctx
        self.reward: Any = path.breaker
        self.refill_after = 0
        """No backlog refill up to this step (memory-pressure back-off after a reward-model OOM)."""
        self._ooms_answered = 0
        """Reward OOMs already answered by a shed. Counted across steps, not per ``score``: a call that missed
        its deadline can run out of memory after its step has moved on (the next step sheds then)."""
        self._recoveries_seen = 0  # the breaker's recoveries this stage has answered
        self._skipping_cached = False
        """The actor updates of steps on cached scores only are being skipped (logged once per outage)."""

    def run(self, step: int, rollouts: list[Rollout], batch_size: int) -> ScoredBatch:
        self.validate(rollouts)
        self.score(rollouts)
        evicted_before = self.buffer.evictions
        self.buffer.put(rollouts)
        ooms = self.path.counting.ooms  # read once: a late call counts on its own thread
        reward_ooms, self._ooms_answered = ooms - self._ooms_answered, ooms
        if reward_ooms > 0 and self.config.rollout.prefetch_batches > 0:
            # Memory pressure: the buffer is the trainer's elastic memory (the article's OOM came from it),
            # so the backlog is released -- it can be regenerated, an OOM-killed trainer cannot.
            shed = self.buffer.shed(keep_newest=len(rollouts))
            self.refill_after = step + self.config.rollout.oom_backoff_steps
            log.warning("reward model out of memory: released %d buffered rollouts; the backlog is rebuilt "
                        "from step %d", shed, self.refill_after + 1)
        taken_at = self.clock.now()
        batch = self.buffer.take(batch_size)
        valid = [r for r in batch if not r.extra.get("dropped")]
        pairs = gather_objects([(r.prompt, float(r.reward if r.reward is not None else math.nan), r.response,
                                 bool(r.extra.get("reward_cached"))) for r in valid], self.ctx)
        rows = [row for ranked in pairs for row in ranked]
        scores = [score for _, score, _, _ in rows]
        # The guard judges the reward model: scores the breaker served from its cache (circuit open, or
        # a call past its deadline) are the cache's, and judging them, or letting them into the
        # reference, paused healthy batches once the model answered again (every soak's reward hang).
        model = [(p, sc, resp) for p, sc, resp, cached in rows if not cached]
        if model:
            verdict = self.guards.reward.check([sc for _, sc, _ in model], [p for p, _, _ in model], step,
                                               responses=[resp for _, _, resp in model])
        else:
            verdict = GuardVerdict(False, None, 0.0, None, 0.0)
        pause = any_across_ranks(verdict.skip, self.ctx)
        # rows are gathered, so this is the same on every rank (every rank skips its actor update, or none)
        cached_only = bool(rows) and not model
        self._skipping_cached = self._skipping_cached and cached_only
        return ScoredBatch(batch, valid, scores, verdict, pause, self.buffer.evictions - evicted_before, taken_at,
                           cached_only)

    def state_dict(self) -> dict[str, Any]:
        """The refill back-off (the same on every rank; the breaker's reward cache is per rank)."""
        return {"refill_after": self.refill_after}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.refill_after = int(state.get("refill_after", 0))

    def note_cached_only(self, step: int) -> None:
        """Every score of this step came from the breaker's cache: the loop goes on (the critic too), the
        policy does not move. Training it on them moved it on no signal: cached scores all alike give zero
        advantages, so only the KL penalty acted and a long hang pulled the policy back to the reference."""
        if not self._skipping_cached:
            log.warning("reward model not answering: step %d and the next ones run on cached scores only; their "
                        "actor updates are skipped until it answers", step)
            self._skipping_cached = True
        if self.config.metrics.enabled:
            self.registry["verl_updates_skipped_total"].labels(reason="cached_rewards").inc()

    def note_paused(self, step: int, scored: ScoredBatch) -> None:
        """The guard paused this step's update: say why, once, and count it under the rule's label."""
        label = pause_label(scored.verdict.reason, scored.scores)
        log.warning("reward guard: update of step %d skipped (%s)", step, label)
        if self.config.metrics.enabled:
            self.registry["verl_batches_paused_total"].labels(reason=label).inc()

    def _note_recovery(self) -> None:
        """The circuit closed again after being open: the reward guard re-learns its reference from the
        model's next batches instead of comparing them with batches from before the outage. Counted, not
        sampled: on a slow step the breaker can open and close again between two calls of this."""
        breaker = self.path.breaker
        recoveries = breaker.recoveries
        if recoveries > self._recoveries_seen and breaker.state is CircuitState.CLOSED:
            self._recoveries_seen = recoveries
            self.guards.reward.restart_reference()
            log.info("reward model answers again: the reward guard re-learns its reference")

    def validate(self, rollouts: list[Rollout]) -> None:
        keep = set(self.guards.validator.filter([r.response for r in rollouts],
                                                [len(r.response_ids) for r in rollouts]))
        for i, rollout in enumerate(rollouts):
            if i not in keep:
                rollout.extra["dropped"] = True

    def score(self, rollouts: list[Rollout]) -> None:
        size = self.config.reward_batch_size
        valid = [r for r in rollouts if not r.extra.get("dropped")]
        texts = [r.prompt + r.response for r in valid]
        keys = [r.prompt for r in valid]  # the breaker's cache answers by the most similar prompt
        scores: list[float] = []
        breaker = self.reward is self.path.breaker
        cached: list[bool] = []
        for i in range(0, len(texts), size):
            if breaker:
                chunk = [float(s) for s in self.reward.score(texts[i:i + size], prompts=keys[i:i + size])]
                scores.extend(chunk)
                cached.extend([self.path.breaker.last_cached] * len(chunk))
            else:
                scores.extend(float(s) for s in self.reward.score(texts[i:i + size]))
                self.registry["verl_reward_model_calls_total"].labels(outcome="ok").inc()
        for j, (rollout, score) in enumerate(zip(valid, scores, strict=True)):
            rollout.reward = score
            if j < len(cached) and cached[j]:
                rollout.extra["reward_cached"] = True
        self._note_recovery()
