"""The contract every detector keeps (ruptures-style small estimators, but streaming).

A detector sees one series, one sample at a time, in time order, on the injected clock (``t`` are the
samples' own timestamps, so replay and benchmarks run on simulated time). It never reads wall time,
never looks ahead, and keeps bounded state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    """What a detector says about its series after the sample at ``t``.

    ``active``: the condition holds now (rules apply their own ``for`` durations on top).
    ``score``: strength in [0, 1] — an anomaly likelihood, 1 - p-value, or 1.0/0.0 for plain conditions.
    ``details``: the test's numbers for summaries and plots (p_value, slope_per_s, before, after, ...).
    """

    t: float
    active: bool
    score: float = 0.0
    details: dict[str, float] = field(default_factory=dict)


class Detector(ABC):
    """Streaming detector over one series."""

    @abstractmethod
    def update(self, t: float, value: float) -> Finding:
        """Consume one sample (non-finite values are the caller's to count and skip)."""

    def reset(self) -> None:  # noqa: B027 - optional hook; stateless detectors need no reset
        """Forget all state (a series restarted, e.g. a counter reset)."""
