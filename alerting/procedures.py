"""The diagnosis procedures: one small decision procedure per failure path (reward cliff, KL penalty off,
rollout backlog, memory growth, data loading), each over the evidence the monitor handed forward.

Each procedure runs when one of its trigger alerts is among a case's members, reads the series it needs
from the case's ``Evidence`` plus the ``verl_config_info`` labels, and returns a ``PathFinding``
(``alerting/findings.py``): a cause only when it *measured* one, every sentence citing its value and
source, and otherwise the facts that rule a cause out and the evidence that was missing.

Adding a path: write ``def my_path(case: Case) -> PathFinding | None`` (None when its trigger is absent),
decorate it with ``@procedure(triggers=...)``, add the series it reads to ``EVIDENCE_SERIES`` and list it
under ``diagnose:`` of a correlation rule (alerting/README.md). ``TRIGGERS`` and ``EXPLAINS`` are derived
from the decorations, so the table cannot disagree with the procedures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from alerting.evidence import Reading
from alerting.findings import CONFIG_SOURCE, Case, Diagnosis, PathFinding, coef, fmt, when

# Thresholds of the failure paths, named once.
REWARD_NEAR_ZERO = 0.05   # |reward mean| at or below this is "~0"
REWARD_CLIFF = 0.1        # ... or at most this fraction of its level before the alerts
KL_COEF_RANGE = (0.1, 0.5)
BACKLOG_AGE_S = 1800.0    # buffer samples older than 30 min
MEMORY_WINDOW_S = 1800.0  # the leak rule's window
BUFFER_MIN_GROWTH = 0.1   # the buffer "grows" when it gained >= 10 % (and >= 10 samples) over the window
LOADER_RISE = 2.0         # the dataloader's time per step at least doubled ...
LOADER_MIN_RISE_S = 0.02  # ... by at least 20 ms
LOADER_SHARE = 0.5        # ... and, where the other stages are timed, made at least half of the step's slowdown
GPU_BUSY = 0.6            # utilisation at or above this is "normal" for a training GPU
LOOKBACK_S = 600.0        # "before the alerts" = the 10 min before the earliest member's start

# Every series a procedure reads: the monitor captures these (on the firing alerts' nodes) and hands them
# forward as ``Evidence``; a series missing here is "not measured" to the procedure.
EVIDENCE_SERIES = frozenset({
    "verl_reward_mean", "verl_kl_coef", "verl_kl_divergence", "verl_nonfinite_steps_total", "verl_global_step",
    "verl_rollout_buffer_age_seconds", "verl_rollout_workers_alive", "verl_rollout_buffer_size",
    "verl_gpu_memory_total_bytes", "verl_gpu_memory_used_bytes", "verl_actor_tokens_per_second",
    "verl_dataloader_wait_seconds", "verl_stage_seconds", "verl_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL",
})


@dataclass(frozen=True)
class Procedure:
    run: Callable[[Case], PathFinding | None]
    triggers: frozenset[str]  # it runs when one of these alerts is among the members
    explains: frozenset[str]  # the alerts its measured cause accounts for: its triggers and the ones it reads


PROCEDURES: dict[str, Procedure] = {}


def procedure(triggers: tuple[str, ...], also_explains: tuple[str, ...] = ()) -> Callable[
        [Callable[[Case], PathFinding | None]], Callable[[Case], PathFinding | None]]:
    """Register a decision procedure under its function name with the alerts that trigger it."""
    def register(fn: Callable[[Case], PathFinding | None]) -> Callable[[Case], PathFinding | None]:
        PROCEDURES[fn.__name__] = Procedure(fn, frozenset(triggers), frozenset(triggers) | frozenset(also_explains))
        return fn
    return register


REWARD_CHECK = ("python -c \"from verl.models.reward import load_reward_model; "
                "print(load_reward_model('<{}>').score(['Q: What is RL? A: ...']))\"")


def _before(case: Case, name: str, node: str | None, match: dict[str, str] | None = None):  # noqa: ANN202
    """The series' median level in the lookback window before the earliest member began."""
    t1 = case.since - 30.0
    return case.evidence.median(name, t1 - LOOKBACK_S, t1, node, match)


# ---- loss diverges / reward cliff -------------------------------------------------------------------

@procedure(triggers=("NonFiniteGradients", "RewardDistributionDrift", "RewardVarianceSpike"))
def reward_model(case: Case) -> PathFinding | None:
    """Reward mean ~0 or NaN -> the reward model's loading or input format."""
    trig = case.names & PROCEDURES["reward_model"].triggers
    if not trig:
        return None
    node = case.node(sorted(trig)[0])
    ev = case.evidence
    f = PathFinding("reward_model", False)
    mean = ev.latest("verl_reward_mean", node)
    nan = ev.nonfinite("verl_reward_mean", case.since - LOOKBACK_S, node)
    before = _before(case, "verl_reward_mean", node)
    near_zero = mean is not None and (abs(mean.value) <= REWARD_NEAR_ZERO or (
        before is not None and abs(before.value) > REWARD_NEAR_ZERO
        and abs(mean.value) <= REWARD_CLIFF * abs(before.value)))
    was = f", was {fmt(before.value)} before {when(case.since)}" if before is not None else ""
    coef = ev.latest("verl_kl_coef", node)
    penalty_off = coef is not None and not KL_COEF_RANGE[0] <= coef.value <= KL_COEF_RANGE[1]
    off_since = ev.held_since("verl_kl_coef", node) if penalty_off else None
    if near_zero and nan is None and off_since is not None and off_since.t < case.since and mean is not None:
        # rewards fell after the KL penalty went off: a policy that ran away, not a reward model that broke
        f.checked.append(f"reward mean {fmt(mean.value)} (verl_reward_mean{was}) fell after kl_coef = "
                         f"{coef.value:g} {case.since_text(off_since, node)} (verl_kl_coef): the policy left the "
                         "reference without its KL penalty; the reward model is not implicated")
        return f
    facts = []
    if nan is not None and (mean is None or nan.last_t >= mean.t):
        facts.append(f"reward mean is NaN/Inf ({nan.count} sample(s) since {when(nan.first_t)}, verl_reward_mean{was})")
    elif near_zero and mean is not None:
        facts.append(f"reward mean is {fmt(mean.value)} (verl_reward_mean{was})")
    elif nan is not None:
        facts.append(f"reward mean was NaN/Inf in {nan.count} sample(s) since {when(nan.first_t)} "
                     f"(verl_reward_mean; now {fmt(mean.value) if mean else '?'})")
    if facts:
        steps = _increase(case, "verl_nonfinite_steps_total", node)
        if steps:
            facts.append(f"{fmt(steps)} step(s) skipped as non-finite (verl_nonfinite_steps_total)")
        path = case.cfg("reward.path")
        f.cause = True
        f.summary = "Reward model is not scoring: reward mean " + ("NaN" if "NaN" in facts[0] else "~0")
        f.root_cause.append("; ".join(facts) + ": the reward model fails to load or gets malformed input")
        where = f"{case.key('reward.path')} = {path} ({CONFIG_SOURCE})" if path else case.key("reward.path")
        if case.config.get("trainer") == "verl":  # volcengine verl has no load_reward_model: its own words
            f.suggestion.append("Check that the reward function scores one sample: call it on one (prompt, response) "
                                "of the last batch (custom_reward_function.path / reward.custom_reward_function.path, "
                                "or reward_model.model.path for a model); then check that it still parses the "
                                "responses (chat template, stop token)")
        else:
            f.suggestion.append(f"Check that the reward model loads and scores one sample: "
                                f"load_reward_model({where}).score([...]), e.g. "
                                f"{REWARD_CHECK.format(path or case.key('reward.path'))}; "
                                "then check the prompt/response format fed to it")
        return f
    if mean is None:
        f.missing.append("reward mean not measured (no verl_reward_mean samples)")
    else:
        f.checked.append(f"reward mean {fmt(mean.value)} is not near 0 and not NaN (verl_reward_mean{was})")
    if "NonFiniteGradients" in case.names and mean is not None:
        f.missing.append("the non-finite steps do not come from NaN rewards; the learning rate and loss scale "
                         "are not exported")
    return f


@procedure(triggers=("KLDriftDetected",))
def kl_coef(case: Case) -> PathFinding | None:
    """KL rising with the live kl_coef at 0 or outside 0.1-0.5 -> kl_coef."""
    if "KLDriftDetected" not in case.names:
        return None
    node = case.node("KLDriftDetected")
    ev = case.evidence
    f = PathFinding("kl_coef", False)
    live = ev.latest("verl_kl_coef", node)
    conf = case.cfg("kl_coef")
    kl_now = ev.latest("verl_kl_divergence", node)
    held = ev.held_since("verl_kl_coef", node) if live is not None else None
    # KL "before" = its level when kl_coef took its current value (else before the alert began)
    kl_before = (ev.median("verl_kl_divergence", held.t - LOOKBACK_S, held.t, node) if held is not None else None) \
        or _before(case, "verl_kl_divergence", node)
    rise = (f"KL to the reference rose {fmt(kl_before.value)} -> {fmt(kl_now.value)} (verl_kl_divergence)"
            if kl_now is not None and kl_before is not None else
            f"KL to the reference is {fmt(kl_now.value)} and rising (verl_kl_divergence, KLDriftDetected)"
            if kl_now is not None else "KL to the reference is rising (KLDriftDetected)")
    lo, hi = KL_COEF_RANGE
    says = f"; config says {conf}" if conf is not None else ""
    if live is not None:
        if live.value == 0 or not lo <= live.value <= hi:
            held = held or live
            since = case.since_text(held, node)
            state = "the KL penalty is off" if live.value == 0 else f"outside the expected {lo}-{hi}"
            f.cause, f.summary = True, f"KL penalty {'off' if live.value == 0 else 'mis-set'}: kl_coef = {coef(live.value)}"
            f.root_cause.append(f"{case.key('kl_coef')} = {coef(live.value)} {since} (verl_kl_coef{says}): {state}, "
                                f"and {rise}")
            target = conf if conf is not None and lo <= float(_num(conf, -1)) <= hi else "0.2"
            f.suggestion.append(f"Set {case.key('kl_coef')} back to {target} (live {coef(live.value)}, expected {lo}-{hi}) "
                                f"and find what changed it {since} (adaptive KL controller target, an override)")
            return f
        f.checked.append(f"{case.key('kl_coef')} = {coef(live.value)} is within {lo}-{hi} (verl_kl_coef{says})")
        f.missing.append(f"{rise} with the penalty on; the learning rate and reward scale are not exported")
        return f
    c = _num(conf, None)
    if c is not None and (c == 0 or not lo <= c <= hi):
        f.cause, f.summary = True, f"KL penalty {'off' if c == 0 else 'mis-set'}: kl_coef = {coef(c)} in config"
        f.root_cause.append(f"{case.key('kl_coef')} = {coef(c)} ({CONFIG_SOURCE}; the live verl_kl_coef is not measured), "
                            f"and {rise}")
        f.suggestion.append(f"Set {case.key('kl_coef')} to 0.1-0.5 (now {coef(c)})")
        return f
    f.missing.append("live kl_coef not measured (no verl_kl_coef samples)"
                     + (f"; config says {conf} ({CONFIG_SOURCE})" if conf is not None else ""))
    return f


@procedure(triggers=("RolloutBacklog",))
def rollout_backlog(case: Case) -> PathFinding | None:
    """Buffer age > 30 min -> rollout_worker_num."""
    alert = case.member("RolloutBacklog")
    if alert is None:
        return None
    node = case.node("RolloutBacklog")
    ev = case.evidence
    f = PathFinding("rollout_backlog", False)
    age = ev.latest("verl_rollout_buffer_age_seconds", node)
    src = "verl_rollout_buffer_age_seconds"
    value = age.value if age is not None else alert.value
    if age is None and alert.value is not None:
        src = "verl_rollout_buffer_age_seconds via RolloutBacklog"
    if value is None:
        f.missing.append("rollout buffer age not measured (no verl_rollout_buffer_age_seconds samples)")
        return f
    if value <= BACKLOG_AGE_S:
        f.checked.append(f"oldest rollout sample is {fmt(value / 60)} min old ({src}), under 30 min")
        return f
    workers = case.cfg_num("rollout_worker_num")
    alive = ev.latest("verl_rollout_workers_alive", node)
    parts = [f"oldest rollout sample is {fmt(round(value / 60, 1))} min old ({src} > 30 min)"]
    if workers is not None:
        parts.append(f"{case.key('rollout_worker_num')} = {fmt(workers)} ({CONFIG_SOURCE})")
    if alive is not None:
        parts.append(f"{fmt(alive.value)} worker(s) alive (verl_rollout_workers_alive)")
    f.cause, f.summary = True, "Rollout backlog: buffer samples older than 30 min"
    f.root_cause.append("Rollouts back up: " + ", ".join(parts))
    if workers is not None:
        f.suggestion.append(f"Raise {case.key('rollout_worker_num')} from {fmt(workers)} to {fmt(workers * 2)}")
    else:
        f.suggestion.append(f"Raise {case.key('rollout_worker_num')} (live value not reported: no {CONFIG_SOURCE})")
    return f


# ---- GPU memory keeps rising -----------------------------------------------------------------------

@procedure(triggers=("MemoryLeakSuspected",))
def memory_growth(case: Case) -> PathFinding | None:
    """Buffer growing with rollout_buffer_max_size unbounded -> bound it; otherwise a leak with its slope."""
    alert = case.member("MemoryLeakSuspected")
    if alert is None:
        return None
    node = case.node("MemoryLeakSuspected")
    ev = case.evidence
    f = PathFinding("memory_growth", False)
    where = f"GPU {alert.labels['gpu']} " if alert.labels.get("gpu") else ""
    mem = (f"{where}memory rising {fmt(round(alert.value / 1e6, 1))} MB/min (MemoryLeakSuspected, Theil-Sen slope "
           "of the memory floor)" if alert.value is not None else f"{where}memory rising (MemoryLeakSuspected)")
    buf = ev.trend("verl_rollout_buffer_size", MEMORY_WINDOW_S, node, {"stage": "train"})
    max_size = case.cfg_num("rollout_buffer_max_size")
    policy = case.cfg("rollout_buffer_eviction_policy")
    unbounded = max_size is not None and max_size < 0
    bound = (f"{case.key('rollout_buffer_max_size')} = {fmt(max_size)} ({'unbounded, ' if unbounded else ''}{CONFIG_SOURCE})"
             if max_size is not None else None)
    fix = (f"Set {case.key('rollout_buffer_max_size')}: 50000 (now {fmt(max_size) if max_size is not None else 'not reported'}) "
           f"and {case.key('rollout_buffer_eviction_policy')}: fifo or priority"
           + (f" (now {policy})" if policy else ""))
    growing = buf is not None and buf.rising and buf.last - buf.first >= max(10.0, BUFFER_MIN_GROWTH * abs(buf.first))
    grew = (f"the rollout buffer grew {fmt(round(buf.first))} -> {fmt(round(buf.last))} samples "
            f"({fmt(round(buf.slope_per_min, 1))}/min, {buf.source})") if buf is not None else ""
    if growing and unbounded:
        f.cause, f.summary = True, "GPU memory grows with an unbounded rollout buffer"
        f.root_cause.append(f"{mem} while {grew} with {bound}")
        f.suggestion.append(fix)
        return f
    if growing:
        f.cause, f.summary = True, "GPU memory grows with the rollout buffer"
        f.root_cause.append(f"{mem} while {grew}" + (f", bounded by {bound}" if bound else
                                                    f"; its bound is not reported (no {CONFIG_SOURCE})"))
        f.suggestion.append(f"Lower {case.key('rollout_buffer_max_size')}" + (f" from {fmt(max_size)}" if max_size else "")
                            + " if memory runs out before the buffer fills; otherwise it levels off at the bound")
        return f
    if buf is not None:
        f.cause, f.summary = True, "GPU memory leak: memory rises while the rollout buffer is flat"
        total = ev.latest("verl_gpu_memory_total_bytes", node,
                          {"gpu": alert.labels["gpu"]} if alert.labels.get("gpu") else None)
        used = ev.latest("verl_gpu_memory_used_bytes", node,
                         {"gpu": alert.labels["gpu"]} if alert.labels.get("gpu") else None)
        f.root_cause.append(f"{mem} while the rollout buffer holds at {fmt(round(buf.last))} samples "
                            f"({buf.source}, {fmt(round(buf.slope_per_min, 1))}/min): the buffer does not hold it, "
                            "a leak")
        eta = ""
        if total is not None and used is not None and alert.value and alert.value > 0:
            eta = (f"; at this rate memory is full in {fmt(round((total.value - used.value) / alert.value))} min "
                   "(verl_gpu_memory_total_bytes - verl_gpu_memory_used_bytes)")
        f.suggestion.append("Look for tensors kept across steps (stored logits, metric tensors holding graph "
                            f"references){eta}")
        return f
    if unbounded:
        f.cause, f.summary = True, "GPU memory grows with an unbounded rollout buffer"
        f.root_cause.append(f"{mem} with {bound}; the buffer size itself is not measured "
                            "(no verl_rollout_buffer_size samples)")
        f.suggestion.append(fix)
        return f
    f.missing.append("rollout buffer size not measured (no verl_rollout_buffer_size samples): cannot tell "
                     "a growing buffer from a leak" + (f"; {bound}" if bound else ""))
    return f


# ---- throughput halves, GPU utilisation normal ------------------------------------------------------

LOADER_SERIES = (("verl_dataloader_wait_seconds", None), ("verl_stage_seconds", {"stage": "dataloader"}))


@procedure(triggers=("ThroughputDrop",), also_explains=("CPUBoundBottleneck",))
def data_loading(case: Case) -> PathFinding | None:
    """Throughput down with the dataloader's time up (or num_workers 0 / CPU-bound) -> data loading."""
    if "ThroughputDrop" not in case.names:
        return None
    node = case.node("ThroughputDrop")
    ev = case.evidence
    f = PathFinding("data_loading", False)
    tok, tok_before = ev.latest("verl_actor_tokens_per_second", node), _before(case, "verl_actor_tokens_per_second", node)
    drop = (f"tokens/s fell {fmt(round(tok_before.value))} -> {fmt(round(tok.value))} (verl_actor_tokens_per_second)"
            if tok is not None and tok_before is not None else "throughput dropped (ThroughputDrop)")
    loader = None
    for name, match in LOADER_SERIES:
        # its level since the case began, not its newest sample: one slow batch on a busy host is not a rise
        now = ev.median(name, case.since, ev.now(), node, match) or ev.latest(name, node, match)
        before = _before(case, name, node, match)
        if now is not None and before is not None:
            loader = (now, before)
            break
    rose = loader is not None and loader[0].value >= LOADER_RISE * loader[1].value \
        and loader[0].value - loader[1].value >= LOADER_MIN_RISE_S
    workers = case.cfg_num("data.num_workers")
    persistent, pin = case.cfg("data.persistent_workers"), case.cfg("data.pin_memory")
    cpu = "CPUBoundBottleneck" in case.names
    facts = [drop]
    if loader is not None:
        facts.append(f"dataloader time per step {'rose' if rose else 'held at'} {fmt(loader[1].value)} -> "
                     f"{fmt(loader[0].value)} s ({loader[0].source})")
    else:
        f.missing.append("dataloader wait not measured (no verl_dataloader_wait_seconds or "
                         "verl_stage_seconds{stage=\"dataloader\"} samples)")
    rest = _rest_of_step(case, node)
    # A host that slows every stage alike (other processes on its cores, a CPU-bound host) doubles the
    # loader's few milliseconds too, and more workers would not help: the loader must make the slowdown.
    alike = loader is not None and rest is not None and rest[1] > rest[0] \
        and loader[0].value - loader[1].value < LOADER_SHARE * (rest[1] - rest[0])
    if rest is not None:
        facts.append(f"the other stages {'slowed too,' if alike else 'took'} {fmt(round(rest[0], 3))} -> "
                     f"{fmt(round(rest[1], 3))} s per step (verl_stage_seconds)")
    utils = ev.readings("verl_gpu_utilization_ratio", node) or ev.readings("DCGM_FI_DEV_GPU_UTIL", node)
    if utils:
        u = sum(r.value for r in utils) / len(utils)
        facts.append(f"GPU utilisation {fmt(round(u, 2))} ({utils[0].name}, {'normal' if u >= GPU_BUSY else 'low'})")
    else:
        f.missing.append("GPU utilisation not measured (no verl_gpu_utilization_ratio or DCGM_FI_DEV_GPU_UTIL)")
    if cpu:
        facts.append("host CPU-bound (CPUBoundBottleneck)")
    settings = []
    if workers is not None:
        settings.append(f"{case.key('data.num_workers')} = {fmt(workers)}")
    if persistent is not None:
        settings.append(f"{case.key('data.persistent_workers')} = {persistent}")
    if pin is not None:
        settings.append(f"{case.key('data.pin_memory')} = {pin}")
    dataset = case.cfg("data.prompt_dataset")
    if dataset is not None:
        settings.append(f"{case.key('data.prompt_dataset')} = {dataset}")
    if alike:
        f.checked.append("; ".join(facts) + ": every stage slowed alike, the host is slower -- not the data path")
        return f
    tok_since = ev.median("verl_actor_tokens_per_second", case.since, ev.now(), node) or tok
    short = _loader_short_of_drop(loader, rest, tok_since, tok_before) if rose else None
    if short is not None:
        f.checked.append("; ".join(facts) + f": {short} -- not the data path")
        return f
    # A busy CPU or num_workers 0 starves the trainer only through the loader's time: they implicate the data
    # path while that time is not measured; measured and steady, it is not the data path, whatever else is
    # seen (a CI runner's other jobs keep a host CPU-bound while a run's tokens per step fall for its own reasons)
    if not (rose if loader is not None else cpu or workers == 0):
        f.checked.append("; ".join(facts) + ": not the data path")
        return f
    f.cause, f.summary = True, "Data loading starves the trainer"
    conf = f" ({', '.join(settings)}; {CONFIG_SOURCE})" if settings else f" (data settings not reported: no {CONFIG_SOURCE})"
    f.root_cause.append("; ".join(facts) + f": data loading starves the trainer{conf}")
    fixes = []
    if workers is None or workers < 8:
        fixes.append(f"{case.key('data.num_workers')}: 8" + (f" (now {fmt(workers)})" if workers is not None else ""))
    if persistent != "true":
        fixes.append(f"{case.key('data.persistent_workers')}: true" + (f" (now {persistent})" if persistent else ""))
    if pin != "true":
        fixes.append(f"{case.key('data.pin_memory')}: true" + (f" (now {pin})" if pin else ""))
    remote = dataset is not None and "://" in dataset and not dataset.startswith("file://")
    text = ("Set " + ", ".join(fixes)) if fixes else "The loader settings are already 8+ workers, persistent, pinned"
    if remote:
        text += f"; {case.key('data.prompt_dataset')} is network-backed ({dataset}): cache it locally"
    elif dataset is None:
        text += f"; if {case.key('data.prompt_dataset')} is on NFS/S3 (location not reported), cache it locally"
    f.suggestion.append(text)
    return f


def _loader_short_of_drop(loader: tuple[Reading, Reading] | None, rest: tuple[float, float] | None,
                          tok: Reading | None, tok_before: Reading | None) -> str | None:
    """Why a loader that rose still cannot be what cut tokens/s, or None: at the same tokens per step, the fall
    needs the step to take ``before / now - 1`` of its time more, and the loader's rise must be at least
    ``LOADER_SHARE`` of that (a loader 10 -> 40 ms is no cause of a halved tokens/s on a 0.5-s step). Judged
    only where the whole step is timed (loader and other stages) and both tokens/s readings are positive."""
    if loader is None or rest is None or tok is None or tok_before is None or not 0 < tok.value < tok_before.value:
        return None
    needed = (loader[1].value + rest[0]) * (tok_before.value / tok.value - 1.0)
    grew = loader[0].value - loader[1].value
    if grew >= LOADER_SHARE * needed:
        return None
    return (f"the loader's +{fmt(round(grew, 3))} s per step is under half the +{fmt(round(needed, 3))} s "
            "that the fall of tokens/s needs at the same tokens per step")


# Timed stages outside the step's own work: checkpoint saves and validation run every N steps, not per step
NOT_PER_STEP = frozenset({None, "", "dataloader", "checkpoint", "validation"})


def _rest_of_step(case: Case, node: str | None) -> tuple[float, float] | None:
    """The step's stages other than the dataloader (``verl_stage_seconds``), summed: their median time per
    step before the alerts and since; None when no other stage is timed on both sides. verl's own
    ``timing_s/step`` (stage ``step``) already holds its stages, so where it is timed it is the rest alone."""
    ev, before, since, timed = case.evidence, 0.0, 0.0, False
    stages = {r.labels.get("stage") for r in ev.readings("verl_stage_seconds", node)} - NOT_PER_STEP
    if "step" in stages:
        stages = {"step"}
    for stage in sorted(stages):  # each stage once, however many series carry it
        b = _before(case, "verl_stage_seconds", node, {"stage": stage})
        n = ev.median("verl_stage_seconds", case.since, ev.now(), node, {"stage": stage})
        if b is not None and n is not None:
            before, since, timed = before + b.value, since + n.value, True
    return (before, since) if timed else None


def _increase(case: Case, name: str, node: str | None) -> float | None:
    now = case.evidence.latest(name, node)
    before = case.evidence.at(name, case.since - LOOKBACK_S, node)
    if now is None:
        return None
    return max(0.0, now.value - (before.value if before is not None else 0.0))


def _num(text: str | None, default):  # noqa: ANN001, ANN202 - float or the given default
    try:
        return float(text) if text is not None else default
    except ValueError:
        return default


TRIGGERS: dict[str, frozenset[str]] = {name: p.triggers for name, p in PROCEDURES.items()}
# the alerts each procedure explains when it found a cause: a later member outside them still pages alone
EXPLAINS: dict[str, frozenset[str]] = {name: p.explains for name, p in PROCEDURES.items()}
TRIGGER_ALERTS = frozenset().union(*TRIGGERS.values())  # alerts whose diagnosis needs evidence captured


def diagnose(paths: list[str], case: Case) -> Diagnosis:
    """Run the named procedures on one case (unknown names are refused when the rules load)."""
    names = case.names
    return Diagnosis([f for name in paths if names & PROCEDURES[name].triggers
                      and (f := PROCEDURES[name].run(case)) is not None])
