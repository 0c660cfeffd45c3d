"""verl-shaped runs: records in the exact shape of volcengine verl's ``file`` logger, per release and
algorithm, written as verl writes them. Shared by tests/monitor (key sets, tail, cadence) and
benchmarks/verl_cadence.py. Key sets read from verl's source (see monitor/sources/verl_keys.py):

- 0.6: legacy FSDP workers; ``dp_actor`` writes pg_loss/pg_clipfrac/ppo_kl/pg_clipfrac_lower/grad_norm
  (+ kl_loss/kl_coef with use_kl_loss), the worker adds actor/lr, perf/mfu/actor and the
  ``perf/max_memory_*`` peaks; Python ``json.dumps`` through an 8 KB text buffer, NaN as ``NaN``.
- 0.7: as 0.6 plus ``actor/entropy``; same writer.
- 0.8 / 0.9: engine workers, metrics renamed with the role prefix (``actor/perf/max_memory_allocated_gb``,
  ``actor/loss``, ``critic/perf/...``), ``timing_s/update_weights``, ``save_checkpoint`` inside
  ``timing_s/step``; orjson unbuffered, NaN as ``null``.

PPO: critic + KL in the reward (``actor/reward_kl_penalty``, coefficient ``algorithm.kl_ctrl.kl_coef``);
GRPO: no critic, KL as a loss (``actor/kl_loss``, ``actor_rollout_ref.actor.kl_loss_coef`` = 0.001).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VERSIONS = ("0.6", "0.7", "0.8", "0.9")
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GIB = 2.0**30


@dataclass
class RunSpec:
    version: str = "0.7"
    algo: str = "ppo"               # ppo | grpo
    steps: int = 200
    step_s: float = 60.0
    seed: int = 0
    kl_drift_at: int | None = None  # step where the reference KL starts rising 16x over `kl_ramp` steps
    kl_ramp: int = 60
    leak_mb_per_min: float = 0.0
    leak_at: int | None = None
    nan_at: int | None = None       # step whose actor/grad_norm is NaN
    throughput_drop_at: int | None = None  # step from which generation takes twice as long
    test_freq: int = 10
    save_freq: int = 50


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    e = rng.normal(0, sd * math.sqrt(1 - phi * phi), n)
    out = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + e[i]
        out[i] = acc
    return out


def generate(spec: RunSpec) -> tuple[list[dict], np.ndarray]:
    """Records ``{"step": N, "data": {...}}`` for steps 1..steps (verl's global_steps start at 1) and the
    true wall time each was logged at."""
    rng = np.random.default_rng(spec.seed)
    n = spec.steps
    engine = spec.version in ("0.8", "0.9")
    ppo = spec.algo == "ppo"
    kl_base = 0.004 + 0.0005 * _ar1(rng, n, 0.5, 1.0)
    kl_base = np.abs(kl_base)
    live_peak = 41.0 * GIB + rng.normal(0, 0.15 * GIB, n)
    records: list[dict] = []
    times = np.empty(n)
    t = T0
    peak_alloc = 0.0
    for i in range(n):
        step = i + 1
        dur = spec.step_s * float(np.exp(rng.normal(0, 0.05)))
        if spec.throughput_drop_at is not None and step >= spec.throughput_drop_at:
            dur *= 2.0  # the same tokens in twice the time: perf/throughput halves
        parts = {"gen": 0.45, "reward": 0.05, "old_log_prob": 0.08, "ref": 0.07, "adv": 0.01, "update_actor": 0.19}
        if ppo:
            parts.update(values=0.05, update_critic=0.10)
        scale = dur / sum(parts.values())
        timing = {f"timing_s/{k}": v * scale for k, v in parts.items()}
        timing["timing_s/step"] = dur
        extra = 0.0
        if step % spec.test_freq == 0 or step == n:
            timing["timing_s/testing"] = 0.3 * spec.step_s
            extra += timing["timing_s/testing"]
        if step % spec.save_freq == 0 or step == n:
            timing["timing_s/save_checkpoint"] = 0.2 * spec.step_s
            if engine:  # 0.8+: inside the step timer (monitor/sources/verl_keys.py)
                dur += timing["timing_s/save_checkpoint"]
                timing["timing_s/step"] = dur
            else:
                extra += timing["timing_s/save_checkpoint"]
        if engine:
            timing["timing_s/update_weights"] = 0.02 * scale
        t += dur + extra
        times[i] = t
        kl = float(kl_base[i])
        if spec.kl_drift_at is not None and step >= spec.kl_drift_at:
            kl *= 1.0 + 15.0 * min(1.0, (step - spec.kl_drift_at) / spec.kl_ramp)
        mem = float(live_peak[i]) - (2 * (3 - i) * GIB if i < 3 else 0.0)  # warm-up: peaks ratchet up
        if spec.leak_at is not None and step >= spec.leak_at:
            mem += spec.leak_mb_per_min * 1e6 * (t - times[spec.leak_at - 1]) / 60.0
        peak_alloc = max(peak_alloc, mem)
        score = 0.2 + 0.5 / (1 + math.exp(-(step - n / 3) / (n / 10))) + rng.normal(0, 0.03)
        tokens = 1024 * 700 * float(np.exp(rng.normal(0, 0.03)))
        d: dict = {
            "actor/pg_loss": float(rng.normal(0, 0.05)), "actor/pg_clipfrac": abs(float(rng.normal(0.02, 0.005))),
            "actor/ppo_kl": abs(float(rng.normal(2e-4, 5e-5))), "actor/pg_clipfrac_lower": 0.0,
            "actor/grad_norm": abs(float(rng.normal(0.5, 0.1))), "actor/lr": 1e-6,
            "perf/mfu/actor": 0.35,
        }
        if spec.version != "0.6":
            d["actor/entropy"] = 0.6 + float(rng.normal(0, 0.02))
        if engine:
            d["actor/loss"] = d["actor/pg_loss"]
            d["actor/perf/max_memory_allocated_gb"] = peak_alloc / GIB
            d["actor/perf/max_memory_reserved_gb"] = peak_alloc / GIB + 4.0
            d["actor/perf/cpu_memory_used_gb"] = 210.0 + float(rng.normal(0, 1))
        else:
            d["perf/max_memory_allocated_gb"] = peak_alloc / GIB
            d["perf/max_memory_reserved_gb"] = peak_alloc / GIB + 4.0
            d["perf/cpu_memory_used_gb"] = 210.0 + float(rng.normal(0, 1))
        if ppo:
            d.update({"actor/reward_kl_penalty": kl, "actor/reward_kl_penalty_coeff": 0.001,
                      "critic/vf_loss": abs(float(rng.normal(0.1, 0.02))), "critic/vf_clipfrac": 0.01,
                      "critic/vpred_mean": float(rng.normal(0.3, 0.05)), "critic/grad_norm": abs(float(rng.normal(1, 0.2))),
                      "critic/lr": 1e-5, "perf/mfu/critic": 0.3,
                      "critic/values/mean": 0.3, "critic/values/max": 1.2, "critic/values/min": -0.4,
                      "critic/vf_explained_var": 0.4})
            if engine:
                d["critic/loss"] = d["critic/vf_loss"]
                d["critic/perf/max_memory_allocated_gb"] = 30.0
                d["critic/perf/max_memory_reserved_gb"] = 34.0
        else:
            d.update({"actor/kl_loss": kl, "actor/kl_coef": 0.001})
        d.update({"critic/score/mean": score, "critic/score/max": 1.0, "critic/score/min": 0.0,
                  "critic/rewards/mean": score - (0.001 * kl if ppo else 0.0), "critic/rewards/max": 1.0,
                  "critic/rewards/min": 0.0, "critic/advantages/mean": 0.0, "critic/advantages/max": 2.1,
                  "critic/advantages/min": -2.0, "critic/returns/mean": score, "critic/returns/max": 1.0,
                  "critic/returns/min": 0.0, "response_length/mean": 300.0, "response_length/max": 512.0,
                  "response_length/min": 20.0, "response_length/clip_ratio": 0.02,
                  "response_length_non_aborted/mean": 300.0, "response/aborted_ratio": 0.0,
                  "prompt_length/mean": 200.0, "prompt_length/max": 400.0, "prompt_length/min": 50.0,
                  "prompt_length/clip_ratio": 0.0})
        d.update(timing)
        d.update({f"timing_per_token_ms/{k}": v * 1000 / tokens for k, v in timing.items()
                  if k.split("/")[1] in ("gen", "ref", "values", "adv", "update_critic", "update_actor")})
        if spec.version in ("0.7", "0.8", "0.9"):
            d["timing_s/agent_loop/generate_sequences/mean"] = timing["timing_s/gen"] * 0.9
            d["timing_s/agent_loop/tool_calls/mean"] = 0.0
            if spec.version != "0.7":
                d["timing_s/agent_loop/num_preempted/max"] = 3.0
        d.update({"perf/total_num_tokens": tokens, "perf/time_per_step": dur,
                  "perf/throughput": tokens / (dur * 8), "training/global_step": step, "training/epoch": 0})
        if "timing_s/testing" in timing:
            d["val-core/openai/gsm8k/reward/mean@1"] = score
        if spec.nan_at == step:
            d["actor/grad_norm"] = float("nan")
        records.append({"step": step, "data": d})
    return records, times


def encode(record: dict, version: str) -> bytes:
    """One line as verl's FileLogger writes it: json.dumps (NaN literal) before 0.8, orjson (NaN as
    null) after."""
    if version in ("0.8", "0.9"):
        clean = {"step": record["step"], "data": {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                                 for k, v in record["data"].items()}}
        return json.dumps(clean, separators=(",", ":")).encode() + b"\n"
    return json.dumps(record).encode() + b"\n"


def write_finished(path: Path, spec: RunSpec) -> tuple[list[dict], np.ndarray]:
    """The whole run as a finished file whose mtime is the last record's time."""
    records, times = generate(spec)
    path.write_bytes(b"".join(encode(r, spec.version) for r in records))
    os.utime(path, (times[-1], times[-1]))
    return records, times


class LiveWriter:
    """Appends records as verl does while a run goes on: 0.8+ line by line, 0.6/0.7 in 8 KB bursts
    (Python's text buffer) with the rest flushed on close; mtime follows the simulated clock."""

    BUFFER = 8192

    def __init__(self, path: Path, version: str) -> None:
        self.path, self.version = path, version
        self.fh = path.open("wb")
        self.pending = b""
        self.closed = False

    def log(self, record: dict, t: float) -> None:
        line = encode(record, self.version)
        if self.version in ("0.8", "0.9"):
            self.fh.write(line)
            flushed = True
        else:
            self.pending += line
            flushed = False
            while len(self.pending) >= self.BUFFER:
                self.fh.write(self.pending[: self.BUFFER])
                self.pending = self.pending[self.BUFFER:]
                flushed = True
        self.fh.flush()
        if flushed:
            os.utime(self.path, (t, t))

    def close(self, t: float) -> None:
        self.fh.write(self.pending)
        self.pending = b""
        self.fh.close()
        self.closed = True
        os.utime(self.path, (t, t))
