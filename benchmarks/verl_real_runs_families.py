"""The failure families of issue 32, written with volcengine verl 0.9.1's own code (``--set families`` of
benchmarks/verl_real_runs_writer.py, which runs it; see that file for the virtual environment).

Each run is a synthetic batch per step pushed through verl's ``apply_kl_penalty`` (PPO, REINFORCE++: KL in
the reward), ``compute_advantage`` (GAE, GRPO, REINFORCE++, RLOO), ``agg_loss`` (``actor/entropy`` as the v1
trainer computes it from per-token entropies), ``compute_data_metrics`` (in the v0 layout, responses padded
to the cap, or the v1 layout, padded to the batch's longest response with ``response_length`` carried apart:
verl issue 7817, where ``response_length/clip_ratio`` is measured against the batch maximum and so is never
0), ``compute_timing_metrics``, ``compute_throughout_metrics`` and ``reduce_metrics``, and logged by
``Tracking(default_backend=["file"])``. A resume writes a second log from the checkpoint step on, as verl's
``FileLogger`` does (it opens its path with ``"wb"``): the truth's ``restart_index`` says where the file was
truncated.

Every run's ``<run>.truth.json`` says its fault family, onset and end step, the deadline in steps (and in
seconds for a hang), and which alert names count as being about it (``alerts``; ``*`` globs).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import AdvantageEstimator, FixedKLController, agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.utils.tracking import Tracking

from verl import DataProto

T0 = 1_780_272_000.0  # 2026-06-01T00:00:00Z
GIB = 2.0**30
PROMPT, CAP = 32, 128
STEPS = {20.0: 300, 60.0: 240, 90.0: 220, 300.0: 200, 3600.0: 150}
ESTIMATOR = {"ppo": AdvantageEstimator.GAE, "grpo": AdvantageEstimator.GRPO,
             "reinforce": AdvantageEstimator.REINFORCE_PLUS_PLUS, "rloo": AdvantageEstimator.RLOO}
KL_IN_REWARD = {"ppo", "reinforce"}  # algorithm.use_kl_in_reward; GRPO and RLOO use the KL loss
HANG_S = 1800.0
# family -> (alerts about it, deadline in steps); a hang's deadline is in seconds (``deadline_s``)
FAMILIES = {
    "entropy_collapse": (["PolicyEntropyShift"], 15),
    "entropy_explosion": (["PolicyEntropyShift"], 15),
    "length_cap": (["ResponseLengthAtCap"], 15),
    "grad_burst": (["GradientNormBurst", "LossDivergence", "NonFiniteGradients"], 5),
    "reward_hack": (["RewardHackingSuspected"], 0),  # 3 validation points + 10 steps: see write_plan
    "kl_blowup": (["KLDriftDetected"], 20),
    "hang": (["TrainerDown", "TrainingStalled", "*Hang*", "*Stall*"], 0),
}


@dataclass
class Plan:
    name: str
    algo: str
    family: str  # a fault family or "healthy"
    step_s: float
    onset: int | None = None
    end: int | None = None  # last faulty step (None: to the end of the run)
    variant: str = ""  # healthy: growth, ratchet, resume, cadence, v1bug
    layout: str = "v0"
    test_freq: int = 10


PLANS = [
    Plan("ppo-entropy_collapse-60s", "ppo", "entropy_collapse", 60.0, 120),
    Plan("grpo-entropy_collapse-20s", "grpo", "entropy_collapse", 20.0, 150),
    Plan("rloo-entropy_collapse-3600s", "rloo", "entropy_collapse", 3600.0, 90),
    Plan("grpo-entropy_explosion-300s", "grpo", "entropy_explosion", 300.0, 110),
    Plan("reinforce-entropy_explosion-60s", "reinforce", "entropy_explosion", 60.0, 130),
    Plan("grpo-length_cap-60s", "grpo", "length_cap", 60.0, 120),
    Plan("ppo-length_cap-300s", "ppo", "length_cap", 300.0, 100),
    Plan("rloo-length_cap_v1-20s", "rloo", "length_cap", 20.0, 160, layout="v1"),
    Plan("ppo-grad_burst-60s", "ppo", "grad_burst", 60.0, 130),
    Plan("ppo-grad_burst-3600s", "ppo", "grad_burst", 3600.0, 90),
    Plan("grpo-grad_burst-20s", "grpo", "grad_burst", 20.0, 160),
    Plan("grpo-reward_hack-60s", "grpo", "reward_hack", 60.0, 110, test_freq=5),
    Plan("ppo-reward_hack-300s", "ppo", "reward_hack", 300.0, 100, test_freq=10),
    Plan("reinforce-reward_hack-20s", "reinforce", "reward_hack", 20.0, 140, test_freq=10),
    Plan("ppo-kl_blowup-90s", "ppo", "kl_blowup", 90.0, 110),
    Plan("grpo-kl_blowup-60s", "grpo", "kl_blowup", 60.0, 120),
    Plan("rloo-kl_blowup-300s", "rloo", "kl_blowup", 300.0, 100),
    Plan("ppo-hang-20s", "ppo", "hang", 20.0, 150, 150),
    Plan("grpo-hang-60s", "grpo", "hang", 60.0, 120, 120),
    Plan("reinforce-hang-300s", "reinforce", "hang", 300.0, 100, 100),
    Plan("grpo-healthy_growth-60s", "grpo", "healthy", 60.0, variant="growth"),
    Plan("ppo-healthy_growth-300s", "ppo", "healthy", 300.0, variant="growth"),
    Plan("grpo-healthy_ratchet-20s", "grpo", "healthy", 20.0, variant="ratchet"),
    Plan("rloo-healthy_ratchet-60s", "rloo", "healthy", 60.0, variant="ratchet"),
    Plan("ppo-healthy_resume-60s", "ppo", "healthy", 60.0, variant="resume"),
    Plan("grpo-healthy_cadence-20s", "grpo", "healthy", 20.0, variant="cadence"),
    Plan("grpo-healthy_v1bug-60s", "grpo", "healthy", 60.0, variant="v1bug", layout="v1"),
    Plan("ppo-healthy_v1bug-300s", "ppo", "healthy", 300.0, variant="v1bug", layout="v1"),
    Plan("reinforce-healthy-3600s", "reinforce", "healthy", 3600.0),
    Plan("rloo-healthy-20s", "rloo", "healthy", 20.0),
    Plan("ppo-healthy-20s", "ppo", "healthy", 20.0),
    # (new plans go last: a plan's seed is its index)
    Plan("grpo-kl_blowup_early-90s", "grpo", "kl_blowup", 90.0, 40),  # inside the KL warm-up
]


def ramp(step: int, onset: int | None, span: float) -> float:
    """0 before the onset, rising linearly to 1 over ``span`` steps."""
    if onset is None or step < onset:
        return 0.0
    return min(1.0, (step - onset + 1) / span)


class Run:
    """One run's evolving state: the learning curve, the fault, the memory peak."""

    def __init__(self, plan: Plan, rng: np.random.Generator) -> None:
        self.p, self.rng = plan, rng
        self.n = 1 if plan.algo == "ppo" else 4
        self.bsz = 64  # PPO: 64 prompts; the group estimators: 16 prompts x 4 samples
        self.kl_ar = self.ent_ar = 0.0
        self.peak = 0.0
        self.ratchet_top = 0.0

    def learn(self, step: int) -> float:
        return 1.0 / (1.0 + math.exp(-(step - 70) / 25.0))

    def mean_len(self, step: int) -> float:
        base = 0.32 * CAP + 0.06 * CAP * self.learn(step)
        if self.p.variant == "growth":  # healthy: responses grow x1.9 while the policy learns to reason
            base = 0.33 * CAP * (1.0 + 0.9 * min(1.0, step / (0.8 * STEPS[self.p.step_s])))
        if self.p.family == "length_cap":  # the policy pads its answers out to the cap
            base += (1.05 * CAP - base) * ramp(step, self.p.onset, 12)
        return base

    def score_p(self, step: int) -> float:
        p = 0.3 + 0.45 * self.learn(step)
        if self.p.family == "reward_hack":
            p += (0.94 - p) * ramp(step, self.p.onset, 40)
        return p

    def val_score(self, step: int) -> float:
        v = 0.25 + 0.37 * self.learn(step) + float(self.rng.normal(0, 0.015))
        if self.p.family == "reward_hack":
            v -= (v - 0.12) * ramp(step, self.p.onset, 40)  # the exploit does not transfer: 0.62 -> 0.12
        return v

    def entropy(self, step: int) -> float:
        self.ent_ar = 0.8 * self.ent_ar + float(self.rng.normal(0, 0.012))
        e = 0.7 - 0.18 * self.learn(step) + self.ent_ar
        if self.p.family == "entropy_collapse":
            e *= 10.0 ** (-ramp(step, self.p.onset, 20))  # 10x in 20 steps
        if self.p.family == "entropy_explosion":
            e *= 1.0 + 3.0 * ramp(step, self.p.onset, 15)
        return max(e, 0.005)

    def kl_level(self, step: int) -> float:
        self.kl_ar = 0.7 * self.kl_ar + float(self.rng.normal(0, 0.002))
        kl = 0.02 + 0.01 * self.learn(step)
        kl = kl * (1 - math.exp(-step / 15.0)) + self.kl_ar * min(1.0, step / 15.0)
        if self.p.family == "kl_blowup" and step >= (self.p.onset or 0):
            k = step - self.p.onset
            kl += 0.0008 * k + 0.00012 * k * k  # accelerating: x4 in ~15 steps, x40 by the end
        return max(kl, 0.0)


def batch_for(run: Run, step: int, kl: float) -> DataProto:
    rng, p = run.rng, run.p
    # a healthy cadence change: from step 120 the batch is 3x larger and each step 3x longer (same tokens/s)
    bsz = run.bsz * (3 if p.variant == "cadence" and step > 120 else 1)
    lens = np.clip(rng.normal(run.mean_len(step), 0.12 * CAP, bsz), 4, CAP).astype(int)
    if p.variant == "v1bug":
        lens = np.minimum(lens, CAP - 6)  # nothing truncated: clip_ratio must read 0, verl V1 reads 1/batch
    width = int(lens.max()) if p.layout == "v1" else CAP  # V1: padded to the batch's longest response
    prompt_len = rng.integers(12, PROMPT + 1, bsz)
    attn = torch.zeros(bsz, PROMPT + width, dtype=torch.int64)
    for i in range(bsz):
        attn[i, PROMPT - prompt_len[i]: PROMPT] = 1
        attn[i, PROMPT: PROMPT + lens[i]] = 1
    response_mask = attn[:, PROMPT:].clone()
    seq_score = (rng.random(bsz) < run.score_p(step)).astype(np.float32)
    scores = torch.zeros(bsz, width)
    for i in range(bsz):
        scores[i, lens[i] - 1] = float(seq_score[i])
    old_lp = torch.tensor(rng.normal(-1.2, 0.4, (bsz, width)), dtype=torch.float32)
    ref_lp = old_lp - torch.tensor(rng.normal(kl, 0.05, (bsz, width)), dtype=torch.float32)
    tensors = {"prompts": torch.ones(bsz, PROMPT, dtype=torch.int64), "responses": torch.ones(bsz, width, dtype=torch.int64),
               "attention_mask": attn, "response_mask": response_mask, "token_level_scores": scores,
               "old_log_probs": old_lp, "ref_log_prob": ref_lp}
    if p.layout == "v1":
        tensors["prompt_length"] = torch.tensor(prompt_len, dtype=torch.float32)
        tensors["response_length"] = torch.tensor(lens, dtype=torch.float32)
    if p.algo == "ppo":
        tensors["values"] = torch.tensor(rng.normal(0.4, 0.2, (bsz, width)), dtype=torch.float32) * response_mask
    uids = np.array([str(uuid.UUID(int=int(rng.integers(1 << 62)) + k // run.n)) for k in range(bsz)], dtype=object)
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
    data.meta_info["global_token_num"] = attn.sum(-1).tolist()
    return data


def step_metrics(run: Run, step: int, kl_ctrl: FixedKLController) -> tuple[dict, float]:
    """One step's logged metrics (as verl computes them) and its wall time inside ``timing_s/step``."""
    p, rng = run.p, run.rng
    kl = run.kl_level(step)
    data = batch_for(run, step, kl)
    metrics: dict = {}
    if p.algo in KL_IN_REWARD:
        data, kl_metrics = apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty="kl")
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(data, adv_estimator=ESTIMATOR[p.algo], gamma=1.0, lam=1.0, num_repeat=run.n,
                             norm_adv_by_std_in_grpo=True, config=AlgoConfig())
    mask = data.batch["response_mask"].float()
    ent_tokens = torch.tensor(rng.gamma(4.0, run.entropy(step) / 4.0, tuple(mask.shape)), dtype=torch.float32)
    metrics["actor/entropy"] = float(agg_loss(loss_mat=ent_tokens, loss_mask=mask, loss_agg_mode="token-mean"))
    resp = float(mask.sum(-1).mean())
    step_s = p.step_s * (3.0 if p.variant == "cadence" and step > 120 else 1.0)
    step_dur = step_s * (resp / (0.35 * CAP)) * float(np.exp(rng.normal(0, 0.04)))
    parts = {"gen": 0.45, "reward": 0.05, "old_log_prob": 0.08, "ref": 0.07, "adv": 0.01, "update_actor": 0.19}
    if p.algo == "ppo":
        parts.update(values=0.05, update_critic=0.10)
    scale = step_dur / sum(parts.values())
    timing_raw = {k: v * scale for k, v in parts.items()}
    if p.family == "hang" and step == p.onset:  # a collective inside update_actor waits 30 min, then goes on
        timing_raw["update_actor"] += HANG_S
        step_dur += HANG_S
    if step % 50 == 0:
        timing_raw["save_checkpoint"] = 0.15 * step_s
        step_dur += timing_raw["save_checkpoint"]
    timing_raw["step"] = step_dur
    mb = 4
    grad = np.exp(rng.normal(math.log(0.6), 0.15, mb))
    clipfrac = np.abs(rng.normal(0.02, 0.005, mb))
    pg_loss = rng.normal(0, 0.05, mb)
    burst = p.family == "grad_burst" and step >= (p.onset or 10**9)
    if burst:
        k = step - p.onset
        grad = grad * (50.0 if k < 3 or rng.random() < 0.4 else 8.0)  # bursts x50, then a restless norm
        clipfrac = clipfrac + min(0.3, 0.05 * (k + 1))
        pg_loss = pg_loss + rng.normal(0, 0.5 + 0.2 * k, mb)
    actor = {"actor/pg_loss": list(pg_loss), "actor/pg_clipfrac": list(clipfrac),
             "actor/ppo_kl": list(np.abs(rng.normal(2e-4, 5e-5, mb))), "actor/pg_clipfrac_lower": [0.0] * mb,
             "actor/grad_norm": list(grad)}
    if p.algo not in KL_IN_REWARD:
        actor["actor/kl_loss"] = list(kl + rng.normal(0, 0.0005, mb))
        actor["actor/kl_coef"] = [0.001] * mb
    metrics.update(reduce_metrics(actor))
    metrics["actor/lr"] = 1e-6
    live = 38.0 * GIB + 6.0 * GIB * resp / CAP + float(rng.normal(0, 0.05 * GIB))
    if p.variant == "ratchet" and step <= 25:  # longer batches arrive one by one: the peak ratchets up
        run.ratchet_top = max(run.ratchet_top, float(rng.uniform(0, 5.0 * GIB)) * step / 25.0)
    run.peak = max(run.peak, live + run.ratchet_top - 3.0 * GIB * max(0, 4 - step))
    metrics["actor/perf/max_memory_allocated_gb"] = run.peak / GIB
    metrics["actor/perf/max_memory_reserved_gb"] = run.peak / GIB + 4.0
    metrics["actor/perf/cpu_memory_used_gb"] = 210.0 + float(rng.normal(0, 1))
    if p.algo == "ppo":
        vf = np.abs(rng.normal(0.1, 0.02, mb))
        if burst and step >= p.onset + 3:  # the critic follows the actor off the cliff: x75
            vf = vf * 75.0 * float(np.exp(rng.normal(0, 0.2)))
        metrics.update(reduce_metrics({"critic/vf_loss": list(vf), "critic/vf_clipfrac": [0.01] * mb,
                                       "critic/vpred_mean": list(rng.normal(0.3, 0.05, mb)),
                                       "critic/grad_norm": list(np.abs(rng.normal(1, 0.2, mb)) * (30 if burst else 1))}))
        metrics["critic/lr"] = 1e-5
    metrics["training/global_step"] = step
    metrics["training/epoch"] = 0
    metrics.update(compute_data_metrics(batch=data, use_critic=p.algo == "ppo"))
    metrics.update(compute_timing_metrics(batch=data, timing_raw=timing_raw))
    metrics.update(compute_throughout_metrics(batch=data, timing_raw=timing_raw, n_gpus=8))
    return metrics, step_dur


def _log_attempt(path: Path, run: Run, first: int, last: int, t: float, times: list[float]) -> float:
    p = run.p
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    tracker = Tracking(project_name="verl-ops-issue32", experiment_name=p.name, default_backend=["file"], config={})
    kl_ctrl = FixedKLController(kl_coef=0.001)
    for step in range(first, last + 1):
        metrics, gap = step_metrics(run, step, kl_ctrl)
        if step % p.test_freq == 0:  # trainer.test_freq: validation runs outside the step timer
            metrics["timing_s/testing"] = 0.2 * p.step_s
            ds = "openai/gsm8k"
            v = run.val_score(step)
            metrics[f"val-core/{ds}/reward/mean@4"] = v
            metrics[f"val-core/{ds}/reward/best@4/mean"] = min(1.0, v + 0.15)
            metrics[f"val-aux/{ds}/reward/std@4"] = 0.2 + float(run.rng.normal(0, 0.01))
            metrics[f"val-aux/{ds}/reward/mean@1"] = v + float(run.rng.normal(0, 0.01))
            gap += metrics["timing_s/testing"]
        t += gap
        times.append(t)
        tracker.log(data=metrics, step=step)
    del tracker
    return t


def write_plan(out: Path, p: Plan, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    run = Run(p, rng)
    steps = STEPS[p.step_s]
    times: list[float] = []
    raw = b""
    restart_index = None
    tmp = out / f"{p.name}.jsonl"
    if p.variant == "resume":  # crash at step 130, resume from the step-100 checkpoint after 6 min
        t = _log_attempt(tmp, run, 1, 130, T0, times)
        raw = tmp.read_bytes()
        restart_index = len(times)
        t = _log_attempt(tmp, run, 101, steps, t + 360.0, times)
    else:
        _log_attempt(tmp, run, 1, steps, T0, times)
    raw += tmp.read_bytes()
    tmp.unlink()
    with gzip.GzipFile(out / f"{p.name}.jsonl.gz", "wb", mtime=0) as fh:  # mtime 0: reproducible bytes
        fh.write(raw)
    alerts, deadline = FAMILIES.get(p.family, ([], 0))
    truth = {"run": p.name, "algo": p.algo, "fault": p.family, "variant": p.variant or None, "layout": p.layout,
             "step_s": p.step_s, "steps": steps, "onset_step": p.onset, "end_step": p.end,
             # validation is sparse: a fall is seen after a few of its points, every trainer.test_freq steps
             "deadline_steps": None if p.family == "hang" else 3 * p.test_freq + 10 if p.family == "reward_hack" else deadline,
             # the bound for a hang: max(5 min, a few step times), before NCCL's 600-s timeout
             "deadline_s": max(300.0, 3 * p.step_s) if p.family == "hang" else None,
             "hang_s": HANG_S if p.family == "hang" else None, "test_freq": p.test_freq,
             # a hang: from inside update_actor (the step's last ~30 %) until that step's record
             "fault_start_t": times[p.onset - 1] - HANG_S - 0.3 * p.step_s if p.family == "hang" else None,
             "alerts": alerts, "restart_index": restart_index, "times": times}
    (out / f"{p.name}.truth.json").write_text(json.dumps(truth))
    return truth


def write_all(out: Path, seed: int, only: set[str] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for k, plan in enumerate(PLANS):
        if only is None or plan.name in only:
            write_plan(out, plan, seed * 1000 + k)
            print(plan.name, flush=True)
