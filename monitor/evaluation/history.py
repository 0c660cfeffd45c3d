"""How much of a series' history a rule binding reads: the ring capacity its series is given.

Detectors keep their own bounded state (``detectors/base.py``) and read the ring only to replay a re-size
(a step-cadence detector: ``CadenceScaled.history_samples``, which the evaluator reserves beside this); the
alert's plot reads it (the detector's window and as much context before it, ``plots.render_fit``). So only
the primary condition of a rule with ``plot: true`` asks for history here: the span its detector judges, in seconds over the
series' own interval (``Series.interval``) with a margin, or in samples where the detector counts samples;
``steps:`` scale as the detector itself scales them (``cadence.scaled``). Any other binding asks for none:
its series keeps the store's short history (``store.UNREAD_HISTORY``) unless the diagnosis evidence reads
it. At 1000 GPUs ~13 000 counters bound by non-plotting rules held 150 samples each (~1.2 KB a series in
sealed chunks and a head, and the CPU to seal them) that nothing read. The store caps it at
``limits.capacity``.
"""

from __future__ import annotations

import math
from functools import cache

from monitor.detectors import registry
from monitor.detectors.cadence import scaled
from monitor.evaluation.rules import Rule

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
    once the interval is known); 0 for a binding nothing reads the history of (module docstring)."""
    if not (rule.plot and cond == 0):
        return 0
    c = rule.conditions[cond]
    kind = c.detector_type
    params = {k: c.params.get(k, _default(kind, k)) for k in (*SECONDS.get(kind, ()), *SAMPLES.get(kind, ()))}
    if interval > 0:
        params = scaled(params, c.steps, interval, c.per_step)
        n = sum(float(params[k]) for k in SECONDS.get(kind, ())) / interval * MARGIN
    else:  # seconds cannot be counted yet: what the steps ask for
        n = sum(c.steps.get(k, 0.0) for k in SECONDS.get(kind, ())) * MARGIN
    n = max(n, sum(float(params[k]) for k in SAMPLES.get(kind, ()))) + c.warmup_steps + c.spike_filter
    return math.ceil(max(n * PLOT_CONTEXT, PLOT_MIN_S / interval * MARGIN if interval > 0 else 0.0))
