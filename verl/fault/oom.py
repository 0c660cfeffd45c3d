"""OOM degradation: an out-of-memory error in a model update switches that model to
gradient checkpointing + 4 micro-batches and retries the step, instead of killing the run.

A second OOM while already degraded has nowhere left to go: ``DegradedOOMError`` tells the trainer to
checkpoint and stop, with the knobs an operator can turn. The retry's micro-batching is the trainer's own
update loop (``verl.trainer.update.run_update``), so the degraded path is the one the tests prove.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

from .circuit_breaker import is_oom

log = logging.getLogger(__name__)
T = TypeVar("T")
DEGRADED_MICRO_BATCHES = 4


class DegradedOOMError(RuntimeError):
    """Out of memory again after degrading; the message is one line with the fix."""


class OOMInjection(Protocol):
    """The degrader's injection seam (the fault plan's ``StepOOM``): may raise a real
    ``torch.OutOfMemoryError`` before an attempt does any work."""

    def maybe_raise(self, component: str) -> None: ...


def enable_gradient_checkpointing(model: torch.nn.Module) -> bool:
    """Switch an HF model (or a DDP wrapper of one) to gradient checkpointing; False if unsupported."""
    inner = getattr(model, "module", model)
    for candidate in (inner, getattr(inner, "pretrained_model", None), getattr(inner, "backbone", None)):
        # newer transformers renamed it (the old name warns); take whichever this version has
        for method in ("activation_checkpointing_enable", "gradient_checkpointing_enable"):
            fn = getattr(candidate, method, None)
            if callable(fn):
                fn()
                return True
    return False


class OOMDegrader:
    """Runs one component's update (``critic``, ``actor``) and owns its degraded-mode switch.

    ``update(micro_batches)`` must perform the whole step from scratch (zero grads first) with the
    given number of micro-batches, so a retry after OOM starts clean. ``model`` (optional) is switched
    to gradient checkpointing when degrading; ``on_degrade`` runs for anything else the caller needs.
    Metrics (optional): ``oom_counter`` → ``verl_oom_events_total{component}``, ``degraded_gauge`` →
    ``verl_degraded_mode{component}``."""

    def __init__(
        self,
        component: str,
        *,
        model: torch.nn.Module | None = None,
        micro_batches: int = 1,
        degraded_micro_batches: int = DEGRADED_MICRO_BATCHES,
        on_degrade: Callable[[], None] | None = None,
        injector: OOMInjection | None = None,
        oom_counter: Any = None,
        degraded_gauge: Any = None,
    ) -> None:
        self.component = component
        self.model = model
        self.micro_batches = micro_batches
        self.degraded_micro_batches = degraded_micro_batches
        self.on_degrade = on_degrade
        self.injector = injector
        self._oom_counter, self._gauge = oom_counter, degraded_gauge
        self.degraded = False
        self.oom_events = 0
        self._export()

    @property
    def current_micro_batches(self) -> int:
        return self.degraded_micro_batches if self.degraded else self.micro_batches

    def run(self, update: Callable[[int], T]) -> T:
        while True:
            try:
                return self._attempt(update)
            except Exception as exc:
                if not is_oom(exc):
                    raise
                self._count_oom()
                if self.degraded:
                    raise DegradedOOMError(
                        f"{self.component} ran out of memory again in degraded mode (gradient checkpointing + "
                        f"{self.degraded_micro_batches} micro-batches): lower the batch size or move "
                        f"{self.component} to a larger device"
                    ) from None
                log.warning("%s out of memory: degrading to gradient checkpointing + %d micro-batches and "
                            "retrying the step", self.component, self.degraded_micro_batches)
                self.degrade()

    def degrade(self) -> None:
        """Enter degraded mode (also used on resume, from ``load_state_dict``)."""
        self.degraded = True
        if self.model is not None and not enable_gradient_checkpointing(self.model):
            log.info("%s has no gradient_checkpointing_enable(); degrading by micro-batches only", self.component)
        if self.on_degrade is not None:
            self.on_degrade()
        self._export()

    def _attempt(self, update: Callable[[int], T]) -> T:
        if self.injector is not None:
            self.injector.maybe_raise(self.component)
        return update(self.current_micro_batches)

    def _count_oom(self) -> None:
        self.oom_events += 1
        if self._oom_counter is not None:
            self._oom_counter.labels(component=self.component).inc()
        # drop the failed attempt's activations before the retry
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _export(self) -> None:
        if self._gauge is not None:
            self._gauge.labels(component=self.component).set(1 if self.degraded else 0)

    def state_dict(self) -> dict[str, Any]:
        return {"degraded": self.degraded, "oom_events": self.oom_events}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.oom_events = int(state.get("oom_events", 0))
        if state.get("degraded") and not self.degraded:
            self.degrade()

