"""Fault isolation for the trainer: reward-model circuit breaker and OOM degradation."""

from .circuit_breaker import CircuitState, RewardCircuitBreaker, ScoreCache, is_oom
from .oom import (
    DegradedOOMError,
    OOMDegrader,
    OOMInjector,
    accumulate,
    enable_gradient_checkpointing,
    split_micro_batches,
)

__all__ = [
    "CircuitState",
    "DegradedOOMError",
    "OOMDegrader",
    "OOMInjector",
    "RewardCircuitBreaker",
    "ScoreCache",
    "accumulate",
    "enable_gradient_checkpointing",
    "is_oom",
    "split_micro_batches",
]
