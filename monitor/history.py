"""How much of a series' history a rule binding reads: the ring capacity its series is given.

Detectors keep their own bounded state (``detectors/base.py``); the series' ring is what the alert's plot
draws (the detector's window and as much context before it, ``plots.render_fit``) and what a reader of
the rule's series sees of what the rule judged. A binding asks for the span its detector judges, in
seconds over the series' own interval (``Series.interval``) with a margin, or in samples where the
detector counts samples; ``steps:`` scale as the detector itself scales them (``cadence.scaled``).
The store caps it at ``limits.capacity``.
"""

from __future__ import annotations

import math
from functools import cache

from monitor.detectors import registry
from monitor.detectors.cadence import scaled
from monitor.rules import Rule

MARGIN = 1.25  # intervals jitter around their median: a span of S s may hold more than S / interval samples
PLOT_CONTEXT = 2.0  # the plot shows as much history before the detector's window as inside it
PLOT_MIN_S = 3600.0  # and at least the last hour (a plotted threshold rule has no window of its own)

# detector type -> its parameters that are spans of history in seconds (summed: ks_shift's reference
# window lies before its recent one) ...
SECONDS = {
    "fluctuation": ("window",), "baseline_ratio": ("window",), "counter_increase": ("window",),
    "window_drop": ("window",), "drift": ("window",), "leak": ("window",), "ks_shift": ("reference", "recent"),
    "level_shift": ("baseline_s", "confirm_s"), "exhaustion": ("window", "floor"),
}
# ... or in samples (judgements)
SAMPLES = {"rare_value": ("history",), "context_anomaly": ("history",),
           # the run's own reference: run_reference looks back `lookback` steps (its plot shows them) before
           # its `recent` ones; reference_rise judges its `recent` steps against its first `reference` ones
           "run_reference": ("lookback", "recent"), "reference_rise": ("reference", "recent")}
# judge the newest sample (and its time) only
INSTANT = frozenset({"threshold", "value_age", "staleness", "counter_stall", "step_overrun"})


@cache
def _default(kind: str, param: str) -> float:
    return float(registry.default_param(kind, param))  # inspect.signature: ~20 us, asked per series


def samples_needed(rule: Rule, cond: int, interval: float) -> float:
    """Samples the ring of a series bound to ``rule.conditions[cond]`` should hold at ``interval`` s per
    sample (0: not known yet -- the sample-count parts and ``steps:`` only; the evaluator asks again
    once the interval is known)."""
    c = rule.conditions[cond]
    kind = c.detector_type
    params = {k: c.params.get(k, _default(kind, k)) for k in (*SECONDS.get(kind, ()), *SAMPLES.get(kind, ()))}
    if interval > 0:
        params = scaled(params, c.steps, interval, c.per_step)
        n = sum(float(params[k]) for k in SECONDS.get(kind, ())) / interval * MARGIN
    else:  # seconds cannot be counted yet: what the steps ask for
        n = sum(c.steps.get(k, 0.0) for k in SECONDS.get(kind, ())) * MARGIN
    n = max(n, sum(float(params[k]) for k in SAMPLES.get(kind, ()))) + c.warmup_steps + c.spike_filter
    if rule.plot and cond == 0:
        n = max(n * PLOT_CONTEXT, PLOT_MIN_S / interval * MARGIN if interval > 0 else 0.0)
    return math.ceil(n)
