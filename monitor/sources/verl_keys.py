"""volcengine verl's metric keys -> our series, one versioned table.

Read from verl's source (releases 0.6.0, 0.7.0 and main at 0.8.0.dev; nothing copied):

- ``verl/trainer/ppo/metric_utils.py``: ``critic/score/{mean,max,min}`` (no ``std``), ``critic/rewards/*``,
  ``critic/advantages/*``, ``perf/throughput`` = tokens / (step time x n_gpus), i.e. *per GPU*,
  ``perf/time_per_step``, ``timing_s/<stage>``, ``timing_per_token_ms/<stage>``.
- ``verl/trainer/ppo/ray_trainer.py``: ``actor/reward_kl_penalty`` (KL to the reference when the KL is in
  the reward, ``algorithm.use_kl_in_reward``) and ``actor/reward_kl_penalty_coeff`` (the controller's
  beta, ``algorithm.kl_ctrl.kl_coef``); ``training/global_step``. Which timers run *outside* the
  ``step`` timer (read from the 0.6.0, 0.7.0, 0.8.0 and 0.9.1 wheels): in 0.6 and 0.7
  ``testing`` and ``save_checkpoint`` both follow the ``with marked_timer("step")`` block; from 0.8 on
  ``save_checkpoint`` moved inside it (0.8.0 and 0.9.1 ``RayPPOTrainer.fit``, and 0.9.1's default v1
  trainer, ``trainer.use_v1: true``) and only ``testing`` (and the profiler's ``start_profile`` /
  ``stop_profile``) stays outside. So the time between two records is ``timing_s/step`` plus those
  outside timers of the record's release (:func:`record_interval`).
- ``verl/workers/actor/dp_actor.py`` / ``core_algos.py``: ``actor/ppo_kl`` (old-vs-new policy KL of one
  update: the update's size, not the distance to the reference), ``actor/kl_loss`` (KL to the reference
  as a loss, ``actor_rollout_ref.actor.use_kl_loss``, GRPO's usual setting) and ``actor/kl_coef``
  (``actor_rollout_ref.actor.kl_loss_coef``), ``actor/pg_clipfrac``, ``actor/entropy`` (0.7+).
- ``verl/workers/fsdp_workers.py`` / ``megatron_workers.py``: ``perf/max_memory_allocated_gb``,
  ``perf/max_memory_reserved_gb`` = ``torch.cuda.max_memory_*()`` never reset: process-lifetime
  *peaks* that only ratchet up; ``perf/cpu_memory_used_gb`` = ``psutil.virtual_memory().used`` (node).
- 0.8+ engine workers (``use_legacy_worker_impl: disable``): the worker's metrics are renamed with the
  role prefix (``rename_dict(output, "actor/")``), so the memory peaks become
  ``actor/perf/max_memory_allocated_gb`` and ``critic/perf/...``.
- verl 0.9's ``rl_insight`` logger exports each key as a Prometheus gauge
  ``rl_insight_monitor_<key with "/" as "_">`` with ``project``/``experiment_name`` labels (seen in a
  downstream user's acknowledgement script; not in verl's own tree at 0.8.0.dev).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

GIB = float(2**30)
RL_INSIGHT_PREFIX = "rl_insight_monitor_"
_SAFE = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class KeyMapping:
    series: str
    labels: dict[str, str] = field(default_factory=dict)
    factor: float = 1.0
    versions: str = "0.6+"   # verl releases that write the key
    meaning: str = ""


def _m(series: str, labels: dict[str, str] | None = None, factor: float = 1.0, versions: str = "0.6+",
       meaning: str = "") -> KeyMapping:
    return KeyMapping(series, labels or {}, factor, versions, meaning)


_PEAK_ALLOC = {"gpu": "torch_max_allocated", "stat": "peak"}
_PEAK_RES = {"gpu": "torch_max_reserved", "stat": "peak"}

KEY_MAP: dict[str, KeyMapping] = {
    # KL to the reference model: in the reward (PPO) or as a loss (GRPO)
    "actor/reward_kl_penalty": _m("verl_kl_divergence", {"source": "reward_kl_penalty"},
                                  meaning="KL(actor||ref) in the reward (algorithm.use_kl_in_reward)"),
    "actor/kl_loss": _m("verl_kl_divergence", {"source": "kl_loss"},
                        meaning="KL(actor||ref) as a loss term (actor_rollout_ref.actor.use_kl_loss)"),
    "actor/reward_kl_penalty_coeff": _m("verl_kl_coef", {"source": "reward_kl_penalty"},
                                        meaning="beta of the KL controller (algorithm.kl_ctrl.kl_coef)"),
    "actor/kl_coef": _m("verl_kl_coef", {"source": "kl_loss"},
                        meaning="actor_rollout_ref.actor.kl_loss_coef"),
    # size of one policy update: not the reference KL
    "actor/ppo_kl": _m("verl_jsonl_actor_ppo_kl", meaning="old-vs-new policy KL of one update (update size)"),
    "actor/entropy": _m("verl_entropy", versions="0.7+"),
    "actor/pg_clipfrac": _m("verl_clip_fraction"),
    "actor/pg_loss": _m("verl_policy_loss"),
    "actor/grad_norm": _m("verl_grad_norm", {"model": "actor"}),
    "critic/grad_norm": _m("verl_grad_norm", {"model": "critic"}),
    "critic/vf_loss": _m("verl_critic_loss"),
    "critic/score/mean": _m("verl_reward_mean", meaning="mean sequence score (reward before KL)"),
    "perf/throughput": _m("verl_actor_tokens_per_second", {"scope": "per_gpu"},
                          meaning="tokens / (step time x n_gpus): per GPU"),
    # memory: process-lifetime peaks (never reset), in GiB
    "perf/max_memory_allocated_gb": _m("verl_gpu_memory_used_bytes", _PEAK_ALLOC, GIB, "0.6-0.7 (legacy workers)",
                                       "torch.cuda.max_memory_allocated(): a peak that only ratchets up"),
    "perf/max_memory_reserved_gb": _m("verl_gpu_memory_used_bytes", _PEAK_RES, GIB, "0.6-0.7 (legacy workers)",
                                      "torch.cuda.max_memory_reserved(): a peak"),
    "actor/perf/max_memory_allocated_gb": _m("verl_gpu_memory_used_bytes", {**_PEAK_ALLOC, "component": "actor"},
                                             GIB, "0.8+ (engine workers)"),
    "actor/perf/max_memory_reserved_gb": _m("verl_gpu_memory_used_bytes", {**_PEAK_RES, "component": "actor"},
                                            GIB, "0.8+ (engine workers)"),
    "critic/perf/max_memory_allocated_gb": _m("verl_gpu_memory_used_bytes", {**_PEAK_ALLOC, "component": "critic"},
                                              GIB, "0.8+ (engine workers)"),
    "critic/perf/max_memory_reserved_gb": _m("verl_gpu_memory_used_bytes", {**_PEAK_RES, "component": "critic"},
                                             GIB, "0.8+ (engine workers)"),
    "training/global_step": _m("verl_global_step"),
}

# host RAM of the node the worker runs on (psutil.virtual_memory().used, GiB): a run filling its node is
# killed by Ray's memory monitor or the kernel's OOM killer (HostMemoryExhaustion)
KEY_MAP.update({
    "perf/cpu_memory_used_gb": _m("verl_jsonl_host_memory_used_bytes", {}, GIB, "0.6-0.7 (legacy workers)",
                                  "psutil.virtual_memory().used on the worker's node"),
    "actor/perf/cpu_memory_used_gb": _m("verl_jsonl_host_memory_used_bytes", {"component": "actor"}, GIB,
                                        "0.8+ (engine workers)", "psutil.virtual_memory().used on the actor's node"),
    "critic/perf/cpu_memory_used_gb": _m("verl_jsonl_host_memory_used_bytes", {"component": "critic"}, GIB,
                                         "0.8+ (engine workers)", "psutil.virtual_memory().used on the critic's node"),
})

# timing_s/<verl stage> -> verl_stage_seconds{stage=...}: one stage label per verl timer, never two
# timers on one series (values and update_critic are both critic work but are distinct timers).
STAGE_MAP: dict[str, str] = {
    "gen": "rollout", "reward": "reward", "ref": "reference", "update_critic": "critic",
    "values": "critic_values", "update_actor": "actor_update", "save_checkpoint": "checkpoint",
    "testing": "validation", "old_log_prob": "old_log_prob", "adv": "advantage", "step": "step",
}
# Timers that run outside ``timing_s/step`` but between two records, per release (module docstring).
OUTSIDE_STEP_TIMERS = ("testing", "save_checkpoint", "start_profile", "stop_profile")  # 0.6, 0.7
OUTSIDE_STEP_TIMERS_08 = ("testing", "start_profile", "stop_profile")                  # 0.8+
# keys only a 0.8+ run writes: the engine workers' role-prefixed perf keys, the weight-sync timer
_MARKERS_08 = ("actor/perf/", "critic/perf/", "timing_s/update_weights")
# Keys whose null/NaN marks a non-finite training step (loss, gradient, KL of actor or critic).
NONFINITE_PREFIXES = ("actor/", "critic/")


@dataclass(frozen=True)
class Mapped:
    name: str
    labels: dict[str, str]
    factor: float


# Reward hacking is the training score pulling away from a validation score: on each record that
# carries validation (every trainer.test_freq steps) the source derives their gap, one series per validation
# mean (val-core's mean@N, best@N/mean, maj@N/mean and val-aux's lower-N ones; not std@N or num_turns)
GAP_PREFIX = "train-minus/"
_VAL_MEAN = re.compile(r"val-(core|aux)/.+/(mean@\d+|(best|maj)@\d+/mean)")


def derived(data: dict) -> dict:
    """Pseudo-keys a record implies: ``train-minus/<val key>`` = critic/score/mean - that validation mean."""
    score = finite_number(data.get("critic/score/mean"))
    if score is None or not any(k.startswith("val-") for k in data):
        return {}
    return {GAP_PREFIX + k: score - v for k, raw in data.items()
            if _VAL_MEAN.fullmatch(k) and (v := finite_number(raw)) is not None}


def unknown_name(key: str) -> str:
    return "verl_jsonl_" + _SAFE.sub("_", key).strip("_").lower()


def map_key(key: str) -> Mapped | None:
    """Our series for one verl key (None for keys that are not metrics: ``step``, time fields)."""
    m = KEY_MAP.get(key)
    if m is not None:
        return Mapped(m.series, m.labels, m.factor)
    if key.startswith(GAP_PREFIX):
        return Mapped("verl_train_validation_gap", {"metric": key[len(GAP_PREFIX):]}, 1.0)
    if key.startswith(("val-core/", "val-aux/")):
        # validation, every trainer.test_freq steps (the trainer's _val_metrics_update): one series per key,
        # told apart by a label so each is its own alert
        return Mapped("verl_validation_metric", {"metric": key}, 1.0)
    if key.startswith("timing_s/"):
        stage = key[len("timing_s/"):]
        if stage.startswith("agent_loop/"):
            # counts (num_preempted, prompt_length) live here next to seconds: keep them unmapped
            return Mapped(unknown_name(key), {}, 1.0)
        return Mapped("verl_stage_seconds", {"stage": STAGE_MAP.get(stage, _SAFE.sub("_", stage))}, 1.0)
    return Mapped(unknown_name(key), {}, 1.0)


_RL_INSIGHT: dict[str, str] = {_SAFE.sub("_", k): k for k in KEY_MAP}


def map_rl_insight(name: str) -> Mapped | None:
    """``rl_insight_monitor_actor_kl_loss`` -> the mapping of ``actor/kl_loss``; None if not rl_insight.
    Keys outside the table keep verl's sanitised name under ``verl_jsonl_``."""
    if not name.startswith(RL_INSIGHT_PREFIX):
        return None
    flat = name[len(RL_INSIGHT_PREFIX):]
    key = _RL_INSIGHT.get(flat)
    if key is None:
        if flat.startswith("timing_s_"):
            return Mapped("verl_stage_seconds", {"stage": STAGE_MAP.get(flat[len("timing_s_"):],
                                                                         flat[len("timing_s_"):])}, 1.0)
        return Mapped("verl_jsonl_" + flat.lower(), {}, 1.0)
    return map_key(key)


def finite_number(raw: object) -> float | None:
    """The finite float of a JSON number; None for null/NaN/Inf/huge or non-numbers."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    try:
        value = float(raw)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _seconds(raw: object) -> float | None:
    value = finite_number(raw)
    return value if value is not None and 0 <= value < 1e7 else None


def release_08(data: dict) -> bool:
    """Whether a record is in verl 0.8+'s layout (engine workers / the v1 trainer)."""
    return any(k.startswith(_MARKERS_08) for k in data)


def outside_step_timers(data: dict) -> tuple[str, ...]:
    return OUTSIDE_STEP_TIMERS_08 if release_08(data) else OUTSIDE_STEP_TIMERS


def record_interval(data: dict) -> float | None:
    """Seconds between this record and the one before it, from verl's own timers (None: unknown)."""
    total = _seconds(data.get("timing_s/step"))
    if total is None:  # metric_utils writes the same number as perf/time_per_step
        total = _seconds(data.get("perf/time_per_step"))
    if total is None:
        return None
    for name in outside_step_timers(data):
        total += _seconds(data.get(f"timing_s/{name}")) or 0.0
    return total


def _dig(doc: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def config_info(resolved: dict) -> tuple[dict[str, str], int | None]:
    """A verl run's resolved config (Hydra's ``.hydra/config.yaml`` or the printed OmegaConf dump) ->
    ``verl_config_info`` labels under our names (what runbooks and suggestions quote) and
    ``trainer.total_training_steps`` when set. ``kl_coef`` is the coefficient of the KL that is on:
    in the reward (``algorithm.kl_ctrl.kl_coef``), as a loss (``actor.kl_loss_coef``), or ``off``."""
    if _dig(resolved, "algorithm.use_kl_in_reward"):
        kl = _dig(resolved, "algorithm.kl_ctrl.kl_coef")
    elif _dig(resolved, "actor_rollout_ref.actor.use_kl_loss"):
        kl = _dig(resolved, "actor_rollout_ref.actor.kl_loss_coef")
    else:
        kl = "off"
    fields = {"model": _dig(resolved, "actor_rollout_ref.model.path"), "kl_coef": kl,
              "reward_batch_size": _dig(resolved, "reward_model.micro_batch_size_per_gpu"),
              "rollout_worker_num": _dig(resolved, "actor_rollout_ref.rollout.agent.num_workers"),
              "data_num_workers": _dig(resolved, "data.dataloader_num_workers"),
              "data_batch_size": _dig(resolved, "data.train_batch_size"),
              "offload_reward_to_cpu": _dig(resolved, "reward_model.model.fsdp_config.param_offload"),
              "lr": _dig(resolved, "actor_rollout_ref.actor.optim.lr")}
    labels = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items() if v is not None}
    total = _dig(resolved, "trainer.total_training_steps")
    return labels, total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None
