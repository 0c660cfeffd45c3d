"""The work a training step did: when it set a new high, a memory peak may rise with it.

``torch.cuda.max_memory_allocated`` (verl's ``perf/max_memory_allocated_gb``, ``actor/perf/*``,
``critic/perf/*``) is a process-lifetime peak: it rises whenever a batch needs more memory than every
batch before it -- longer responses, a longer prompt, more tokens in the batch. While a run warms up
and while its responses grow, that happens at step after step, and a per-step leak test on the peak
alone reads the ratchet as a leak. A leak raises the peak at steps whose work set no new high.

``WorkLog`` is filled by the evaluator with the work series a rule names (``explain_by:``, e.g. verl's
``response_length/max``, ``response_length/mean``, ``prompt_length/max``, ``perf/total_num_tokens``) on
the node and job of the memory series, and read by the leak detector: which record times set a new
high in any of them. All of a verl record's samples share its time, so a record is one key.

The hang detector reads the newest value instead: the seconds of validation/checkpoint work the running
step is due (``verl_step_expected_extra_seconds``, monitor/sources/verl_gaps.py).
"""

from __future__ import annotations

import math
from collections import deque


class WorkLog:
    """Records that set a new high (strictly above every earlier value: a measure stuck at a cap, like
    ``response_length/max`` at the response length, explains no rise) in any work series of one (rule,
    node, job), by record time (the last ``maxlen``)."""

    def __init__(self, maxlen: int = 4096) -> None:
        self._max: dict[int, float] = {}
        self._times: deque[float] = deque()
        self._high: dict[float, bool] = {}
        self.maxlen = maxlen
        self.last_t = -math.inf
        self.last_value = 0.0  # the newest sample's value (the hang rule's expected extra seconds)

    def add(self, key: int, t: float, value: float) -> None:
        """One sample of work series ``key`` (its series id)."""
        if not math.isfinite(value):
            return
        before = self._max.get(key)
        high = before is not None and value > before
        if before is None or high:
            self._max[key] = value
        if t not in self._high:
            self._times.append(t)
            self._high[t] = False
            if len(self._times) > self.maxlen:
                self._high.pop(self._times.popleft(), None)
        self._high[t] = self._high[t] or high
        if t >= self.last_t:
            self.last_value = value
        self.last_t = max(self.last_t, t)

    def restart(self) -> None:
        """The process restarted (its memory peaks fell): work highs count from its first batch again."""
        self._max.clear()

    def __len__(self) -> int:
        return len(self._times)

    def at_high(self, t: float) -> bool:
        """Whether any work series set a new high in the record at ``t`` (False when none was seen then:
        the first record of a series is its baseline, not a high)."""
        return self._high.get(t, False)
