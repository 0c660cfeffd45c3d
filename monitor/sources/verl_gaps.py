"""Expected gaps in a verl log: the steps that validate (``trainer.test_freq``) or save a checkpoint
(``trainer.save_freq``) run longer than a training step by the time that work takes, and the hang rule
(TrainingStalled) must judge them against the run's own validation and save durations, not against its
median training step (a 4-min validation every 20 steps of a 40-s run is not a hang).

``ExpectedGaps`` learns from the records which steps did that work and how long it took
(``timing_s/testing``, ``timing_s/save_checkpoint``, a record carrying ``val-core/``/``val-aux/``/``val/``
keys) and says, for the step now running, how many extra seconds it is due
(``verl_step_expected_extra_seconds``, read by the hang detector through its ``explain_by``).

Which steps: every ``test_freq``/``save_freq`` step when the resolved config gives them, else the
greatest common divisor of the steps seen doing that work (verl runs it at multiples of the frequency,
and at the last step). Before a run has shown its cadence, a step whose number is a multiple of
``UNLEARNED_EVERY`` (verl's examples use 5, 10, 20, 25, 50, 100) is given max(``unknown_s``, 2 typical
steps) while the run is within its first ``UNLEARNED_UNTIL`` steps: the first validation's length cannot
be known before it ends. 5 min: a 4-min validation fits, and with the hang rule's 4-min floor a hang in
such a step of a fast run still pages at 9 min, before NCCL's default 600 s timeout. How long: ``margin`` x the longest of the last few durations of that work.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from monitor.sources.verl_keys import finite_number

EXPECTED_EXTRA = "verl_step_expected_extra_seconds"
# seconds before NCCL's watchdog aborts a collective hung since the running step began
# (actor_rollout_ref.nccl_timeout), while the run's own steps leave room to page before it
COLLECTIVE_LEFT = "verl_step_collective_timeout_left_seconds"
COLLECTIVE_ROOM_S = 120.0  # a healthy step must end this far before the timeout (the rule pages 90 s before it)
COLLECTIVE_MIN_STEPS = 5
UNLEARNED_EVERY = 5
UNLEARNED_UNTIL = 100
_VAL_PREFIXES = ("val-core/", "val-aux/", "val/")


class _Work:
    """One kind of extra work (validation or checkpoint save): the steps that did it and how long."""

    def __init__(self, freq: int | None, keep: int = 5) -> None:
        self.freq = freq if freq and freq > 0 else None
        self.period: int | None = None
        self.durations: deque[float] = deque(maxlen=keep)

    def saw(self, step: int, seconds: float | None) -> None:
        if step > 0:
            self.period = step if self.period is None else math.gcd(self.period, step)
        if seconds is not None and seconds > 0:
            self.durations.append(seconds)

    def due(self, step: int, last: bool) -> bool | None:
        """Whether ``step`` does this work (None: the run has not shown its cadence yet)."""
        every = self.freq or self.period
        if every is None:
            return None
        return last or step % every == 0


class ExpectedGaps:
    def __init__(self, test_freq: int | None = None, save_freq: int | None = None, total_steps: int | None = None,
                 unknown_s: float = 300.0, margin: float = 1.5) -> None:
        self.validation, self.save = _Work(test_freq), _Work(save_freq)
        self.total_steps, self.unknown_s, self.margin = total_steps, unknown_s, margin
        self.nccl_timeout_s: float | None = None  # actor_rollout_ref.nccl_timeout of the resolved config
        self.last_step: int | None = None
        self._steps: deque[float] = deque(maxlen=32)  # the run's recent step times (records' own timers)
        self._bare: deque[float] = deque(maxlen=32)   # the same without their validation and save seconds

    def configure(self, test_freq: int | None, save_freq: int | None, total_steps: int | None) -> None:
        """The run's resolved config, when it is read (it wins over what the records showed)."""
        if test_freq and test_freq > 0:
            self.validation.freq = test_freq
        if save_freq and save_freq > 0:
            self.save.freq = save_freq
        self.total_steps = total_steps or self.total_steps

    def configure_from(self, resolved: dict, total_steps: int | None) -> None:
        """``configure`` from the run's resolved config, with its NCCL timeout."""
        self.configure(*cadence_of(resolved), total_steps)
        self.nccl_timeout_s = nccl_timeout_of(resolved) or self.nccl_timeout_s

    def observe(self, step: float | None, data: dict, interval: float | None = None) -> None:
        """One record of the run (its ``step``, ``data`` and seconds since the record before, if known)."""
        testing = finite_number(data.get("timing_s/testing"))
        saving = finite_number(data.get("timing_s/save_checkpoint"))
        if interval is not None:
            self._steps.append(interval)
            self._bare.append(max(0.0, interval - (testing or 0.0) - (saving or 0.0)))
        if step is None or step != int(step):
            return
        n = int(step)
        self.last_step = n
        if testing is not None or any(k.startswith(_VAL_PREFIXES) for k in data):
            self.validation.saw(n, testing)
        if saving is not None:
            self.save.saw(n, saving)

    def restarted(self) -> None:
        """verl re-opened its log (a resume): the cadence holds, the step count starts again from the log."""
        self.last_step = None

    def extra_s(self) -> float:
        """Seconds of validation/save work the running step (the one after the last record) is due (an
        unknown validation's allowance is sized by the run's usual step too)."""
        if self.last_step is None:
            return 0.0
        step = self.last_step + 1
        last = self.total_steps is not None and step == self.total_steps
        total, unknown = 0.0, False
        for work in (self.validation, self.save):
            due = work.due(step, last)
            if due is None:
                unknown = unknown or last or (step % UNLEARNED_EVERY == 0 and step <= UNLEARNED_UNTIL)
            elif due:
                if work.durations:
                    total += self.margin * max(work.durations)
                else:
                    unknown = True  # its cadence is known (config, or val keys without a timer), its length not
        typical = statistics.median(self._steps) if self._steps else 0.0
        return total + (max(self.unknown_s, 2.0 * typical) if unknown else 0.0)

    def collective_left(self, elapsed: float, extra: float) -> float | None:
        """Seconds the running step (``elapsed`` in, due ``extra`` s of validation/save) has before NCCL's
        watchdog aborts a collective hung since the step began -- the job dies then, its stacks with it.
        Only where the step time allows a page before that: the run's longest recent step (without its
        validation/save seconds: ``extra`` says what this one is due) x 1.25 plus ``extra`` ends
        ``COLLECTIVE_ROOM_S`` before the timeout (a 10-min-step run cannot tell a hang from a step within
        a 600-s timeout). None: no timeout known, or too few steps seen."""
        if self.nccl_timeout_s is None or len(self._bare) < COLLECTIVE_MIN_STEPS:
            return None
        if 1.25 * max(self._bare) + extra > self.nccl_timeout_s - COLLECTIVE_ROOM_S:
            return None
        return self.nccl_timeout_s - elapsed


def nccl_timeout_of(resolved: dict) -> float | None:
    """``actor_rollout_ref.nccl_timeout`` (seconds, verl's default 600) of a resolved config; None unset."""
    arr = resolved.get("actor_rollout_ref")
    v = arr.get("nccl_timeout") if isinstance(arr, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def cadence_of(resolved: dict) -> tuple[int | None, int | None]:
    """(``trainer.test_freq``, ``trainer.save_freq``) of a resolved verl config; None where unset or off."""
    trainer = resolved.get("trainer") if isinstance(resolved.get("trainer"), dict) else {}
    out = []
    for key in ("test_freq", "save_freq"):
        v = trainer.get(key)
        out.append(v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None)
    return out[0], out[1]
