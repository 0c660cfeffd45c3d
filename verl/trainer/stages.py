"""Stage timing and stage-boundary hooks of one PPO step.

``StageTimer`` replaces hand-written ``t = clock.monotonic()`` pairs: ``with timer("reward"): ...`` adds the
block's seconds to ``timer.seconds["reward"]`` (``verl_stage_seconds{stage}``); a stage timed twice (the
actor's old log-probs and its update) accumulates. Given the rank's ``CollectiveWaits``, it also keeps the
part of each stage spent blocked in collectives (``timer.waiting``): the rest is the rank's own compute.

``StepHooks`` is the only way anything outside the PPO maths acts inside a step: callables registered for
an event run at that stage boundary with the step's ``StepContext``; ``on_stage`` hooks run on entry to a
timed stage, inside its timer (a straggler's sleep counts as that stage's time, as a slow rank's would).
The fault plan (``verl.trainer.fault_plan``) registers its injections here; the step module knows no fault.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from verl.trainer.distributed import CollectiveWaits
from verl.utils.clock import Clock

# Events, in the order a step fires them.
STEP_START = "step_start"            # before the dataloader stage's work (inside its timer)
AFTER_ROLLOUT = "after_rollout"      # rollouts generated, nothing scored yet
BEFORE_REWARD = "before_reward"
BEFORE_ADVANTAGES = "before_advantages"  # ``ctx.kl_coef`` is read after this event
AFTER_UPDATES = "after_updates"      # critic and actor updated (or skipped), before the checkpoint
STEP_END = "step_end"                # ``ctx.step_seconds`` is set
EVENTS = (STEP_START, AFTER_ROLLOUT, BEFORE_REWARD, BEFORE_ADVANTAGES, AFTER_UPDATES, STEP_END)


@dataclass
class StepContext:
    """What a hook may read (and, for ``kl_coef``, change) at a stage boundary."""

    step: int
    kl_coef: float = 0.0
    step_seconds: float = 0.0


class StepHooks:
    def __init__(self) -> None:
        self._hooks: dict[str, list[Callable[[StepContext], None]]] = defaultdict(list)
        self._stage_hooks: dict[str, list[Callable[[str], None]]] = defaultdict(list)

    def on(self, event: str, hook: Callable[[StepContext], None]) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown step event '{event}'; one of {', '.join(EVENTS)}")
        self._hooks[event].append(hook)

    def fire(self, event: str, ctx: StepContext) -> None:
        for hook in self._hooks.get(event, ()):
            hook(ctx)

    def on_stage(self, stage: str, hook: Callable[[str], None]) -> None:
        self._stage_hooks[stage].append(hook)

    def enter_stage(self, stage: str) -> None:
        for hook in self._stage_hooks.get(stage, ()):
            hook(stage)


@dataclass
class StageTimer:
    clock: Clock
    seconds: dict[str, float] = field(default_factory=dict)
    enter: Callable[[str], None] | None = None  # ``StepHooks.enter_stage``: runs inside the stage's time
    waits: CollectiveWaits | None = None
    waiting: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = self.clock.monotonic()
        waited = self.waits.seconds if self.waits is not None else 0.0
        try:
            if self.enter is not None:
                self.enter(stage)
            yield
        finally:
            elapsed = self.clock.monotonic() - start
            self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed
            if self.waits is not None:  # never more than the stage's own time (two clocks, one of them real)
                wait = min(elapsed, self.waits.seconds - waited)
                self.waiting[stage] = self.waiting.get(stage, 0.0) + wait
