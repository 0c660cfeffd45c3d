"""Fault isolation for the trainer: reward-model circuit breaker and OOM degradation."""

from .circuit_breaker import CircuitState, RewardCircuitBreaker, ScoreCache, is_oom
from .oom import (
    DegradedOOMError,
    OOMDegrader,
    OOMInjection,
    enable_gradient_checkpointing,
)

__all__ = [
    "CircuitState",
    "DegradedOOMError",
    "OOMDegrader",
    "OOMInjection",
    "RewardCircuitBreaker",
    "ScoreCache",
    "enable_gradient_checkpointing",
    "is_oom",
]
