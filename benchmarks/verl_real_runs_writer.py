"""Writes the test runs of benchmarks/verl_runs_real.py with volcengine verl's own code (issue 22).

    python3 -m venv /work/verl-venv
    /work/verl-venv/bin/pip install torch==2.13.0 && /work/verl-venv/bin/pip install verl==0.9.1 cachetools uvicorn fastapi
    cd /tmp && /work/verl-venv/bin/python /work/wt-22/benchmarks/verl_real_runs_writer.py --out /work/wt-22/benchmarks/data/verl_real
    cd /tmp && /work/verl-venv/bin/python $REPO/benchmarks/verl_real_runs_writer.py --set families --seed 32 --out $REPO/benchmarks/data/verl_real2
    cd /tmp && /work/verl-venv/bin/python $REPO/benchmarks/verl_real_runs_writer.py --set signals --seed 40 --out /tmp/verl_signals

Run it with the *PyPI* verl's interpreter and a working directory outside this repository (the project's own
``verl/`` package would shadow it); nothing in the project imports this file. Each run is a synthetic batch
per step (prompts, responses of a length that grows as the policy learns, scores, log-probs) pushed through
verl's ``apply_kl_penalty`` (PPO: KL in the reward), ``compute_advantage`` (GAE or GRPO),
``compute_data_metrics``, ``compute_timing_metrics``, ``compute_throughout_metrics`` and ``reduce_metrics``
(the worker's per-micro-batch lists), and logged by ``Tracking(default_backend=["file"])`` exactly as
``RayPPOTrainer.fit`` logs it. Timers follow verl 0.9.1's v1 trainer: ``save_checkpoint`` inside ``step``,
``testing`` outside it. The true wall time of every record and the fault's truth go to ``<run>.truth.json``;
the log is gzipped (``<run>.jsonl.gz``) to keep the repository small.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import uuid
from pathlib import Path

import numpy as np
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import AdvantageEstimator, FixedKLController
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.utils.tracking import Tracking

from verl import DataProto

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GIB = 2.0**30
PROMPT, RESPONSE, N_PROMPTS = 32, 96, 16
# steps per run and fault onsets by step time: a fault starts after the KL warm-up (~60 steps) except the
# early reward collapse, which is the "3.5 min after start" case of the issue at 10-s steps
CADENCES = {10.0: 360, 180.0: 240, 720.0: 170}
ONSET = {"kl_off": 80, "leak": 80, "nan": 90, "collapse": 100}
KINDS = ("healthy", "kl_off", "leak", "nan", "collapse")
LEAK_MB_PER_MIN = {10.0: 300.0, 180.0: 60.0, 720.0: 30.0}
KL_DRIFT_PER_STEP = 0.0008  # the slow drift: 0.027 -> 0.151 over ~150 steps


def make_batch(rng: np.random.Generator, algo: str, step: int, kind: str, onset: int, n_samples: int,
               kl_level: float) -> DataProto:
    """One step's rollout batch in verl's layout (left-padded prompts, right-padded responses)."""
    bsz = N_PROMPTS * n_samples
    learn = 1.0 / (1.0 + math.exp(-(step - 120) / 40.0))
    mean_len = 40.0 + 40.0 * learn  # responses grow while the policy learns (and the step time with them)
    resp_len = np.clip(rng.normal(mean_len, 12.0, bsz), 4, RESPONSE).astype(int)
    prompt_len = rng.integers(12, PROMPT + 1, bsz)
    attn = torch.zeros(bsz, PROMPT + RESPONSE, dtype=torch.int64)
    for i in range(bsz):
        attn[i, PROMPT - prompt_len[i]: PROMPT] = 1
        attn[i, PROMPT: PROMPT + resp_len[i]] = 1
    response_mask = attn[:, PROMPT:].clone()
    p_correct = 0.25 + 0.5 * learn
    if kind == "collapse" and step >= onset:
        p_correct = 0.01  # the reward model returns ~0 for everything
    seq_score = (rng.random(bsz) < p_correct).astype(np.float32)
    scores = torch.zeros(bsz, RESPONSE)
    for i in range(bsz):
        scores[i, resp_len[i] - 1] = float(seq_score[i])
    old_lp = torch.tensor(rng.normal(-1.2, 0.4, (bsz, RESPONSE)), dtype=torch.float32)
    # per-token log-ratio whose masked mean is the KL level of this step (verl's "kl" estimator: logp - ref)
    ref_lp = old_lp - torch.tensor(rng.normal(kl_level, 0.05, (bsz, RESPONSE)), dtype=torch.float32)
    tensors = {
        "prompts": torch.ones(bsz, PROMPT, dtype=torch.int64), "responses": torch.ones(bsz, RESPONSE, dtype=torch.int64),
        "attention_mask": attn, "response_mask": response_mask, "token_level_scores": scores,
        "old_log_probs": old_lp, "ref_log_prob": ref_lp,
    }
    if algo == "ppo":
        tensors["values"] = torch.tensor(rng.normal(0.4, 0.2, (bsz, RESPONSE)), dtype=torch.float32) * response_mask
    uids = np.array([str(uuid.UUID(int=int(rng.integers(1 << 62)) + k // n_samples)) for k in range(bsz)], dtype=object)
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
    data.meta_info["global_token_num"] = attn.sum(-1).tolist()
    return data


def write_run(out: Path, algo: str, kind: str, step_s: float, seed: int, plateau: float = 0.03,
              drift: float = KL_DRIFT_PER_STEP) -> dict:
    name = f"{algo}-{kind}-{int(step_s)}s"
    rng = np.random.default_rng(seed)
    steps = CADENCES[step_s]
    onset = ONSET.get(kind, 0)
    if kind == "collapse" and step_s <= 10.0:
        onset = 20  # 3.3 min after the start: inside every seconds-sized warm-up
    n_samples = 1 if algo == "ppo" else 4
    log_path = out / f"{name}.jsonl"
    os.environ["VERL_FILE_LOGGER_PATH"] = str(log_path)
    tracker = Tracking(project_name="verl-ops-issue22", experiment_name=name, default_backend=["file"], config={})
    kl_ctrl = FixedKLController(kl_coef=0.001)
    kl_ar = 0.0
    peak = 0.0
    leak_bytes = 0.0
    t = T0
    times: list[float] = []
    step_times: list[float] = []
    base_resp = None
    for step in range(1, steps + 1):
        kl_ar = 0.7 * kl_ar + rng.normal(0, 0.0025)
        # KL to the reference starts at 0 (actor == reference) and warms up to its plateau over ~60 steps
        kl_level = plateau * (1 - math.exp(-step / 20.0)) + kl_ar * min(1.0, step / 20.0)
        if kind == "kl_off" and step >= onset:
            kl_ctrl = FixedKLController(kl_coef=0.0)  # algorithm.kl_ctrl.kl_coef=0: nothing holds the actor back
            kl_level += drift * (step - onset)
        data = make_batch(rng, algo, step, kind, onset, n_samples, max(kl_level, 0.0))
        metrics: dict = {}
        if algo == "ppo":
            data, kl_metrics = apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty="kl")
            metrics.update(kl_metrics)
            data = compute_advantage(data, adv_estimator=AdvantageEstimator.GAE, gamma=1.0, lam=1.0,
                                     config=AlgoConfig())
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
            data = compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO, num_repeat=n_samples,
                                     norm_adv_by_std_in_grpo=True, config=AlgoConfig())
        resp = float(data.batch["response_mask"].sum(-1).float().mean())
        base_resp = base_resp or resp
        step_dur = step_s * (resp / base_resp) * float(np.exp(rng.normal(0, 0.04)))
        parts = {"gen": 0.45, "reward": 0.05, "old_log_prob": 0.08, "ref": 0.07, "adv": 0.01, "update_actor": 0.19}
        if algo == "ppo":
            parts.update(values=0.05, update_critic=0.10)
        scale = step_dur / sum(parts.values())
        timing_raw = {k: v * scale for k, v in parts.items()}
        if step % 50 == 0 or step == steps:  # save_checkpoint runs inside the step timer (v1 trainer)
            timing_raw["save_checkpoint"] = 0.15 * step_s
            step_dur += timing_raw["save_checkpoint"]
        timing_raw["step"] = step_dur
        # the worker's per-micro-batch metric lists, reduced as verl reduces them
        mb = 4
        grad = rng.normal(0.6, 0.1, mb).clip(0.05)
        actor = {"actor/pg_loss": list(rng.normal(0, 0.05, mb)), "actor/pg_clipfrac": list(np.abs(rng.normal(0.02, 0.005, mb))),
                 "actor/ppo_kl": list(np.abs(rng.normal(2e-4, 5e-5, mb))), "actor/pg_clipfrac_lower": [0.0] * mb,
                 "actor/grad_norm": list(grad), "actor/entropy": list(rng.normal(0.6, 0.02, mb))}
        if kind == "nan" and step == onset:
            actor["actor/grad_norm"] = [float("nan")] * mb  # one step's loss went non-finite
        if algo == "grpo":
            coef = 0.0 if kind == "kl_off" and step >= onset else 0.001
            actor["actor/kl_loss"] = list(max(kl_level, 0.0) + rng.normal(0, 0.0005, mb))
            actor["actor/kl_coef"] = [coef] * mb
        metrics.update(reduce_metrics(actor))
        metrics["actor/lr"] = 1e-6
        if kind == "leak" and step >= onset:
            leak_bytes += LEAK_MB_PER_MIN[step_s] * 1e6 * step_dur / 60.0
        live = 38.0 * GIB + 0.6 * GIB * resp / RESPONSE + leak_bytes + rng.normal(0, 0.05 * GIB)
        warm = 3.0 * GIB * max(0, 4 - step)  # the first steps compile kernels and fill caches
        peak = max(peak, live - warm)  # torch's max_memory_allocated: never reset, only ratchets up
        metrics["actor/perf/max_memory_allocated_gb"] = peak / GIB
        metrics["actor/perf/max_memory_reserved_gb"] = peak / GIB + 4.0
        metrics["actor/perf/cpu_memory_used_gb"] = 210.0 + float(rng.normal(0, 1))
        if algo == "ppo":
            critic = {"critic/vf_loss": list(np.abs(rng.normal(0.1, 0.02, mb))), "critic/vf_clipfrac": [0.01] * mb,
                      "critic/vpred_mean": list(rng.normal(0.3, 0.05, mb)), "critic/grad_norm": list(np.abs(rng.normal(1, 0.2, mb)))}
            metrics.update(reduce_metrics(critic))
            metrics["critic/lr"] = 1e-5
        metrics["training/global_step"] = step
        metrics["training/epoch"] = 0
        metrics.update(compute_data_metrics(batch=data, use_critic=algo == "ppo"))
        metrics.update(compute_timing_metrics(batch=data, timing_raw=timing_raw))
        metrics.update(compute_throughout_metrics(batch=data, timing_raw=timing_raw, n_gpus=8))
        gap = step_dur
        if step % 10 == 0 or step == steps:  # testing runs outside the step timer
            metrics["timing_s/testing"] = 0.25 * step_s
            metrics["val-core/openai/gsm8k/reward/mean@1"] = float(metrics["critic/score/mean"])
            gap += metrics["timing_s/testing"]
        t += gap
        times.append(t)
        step_times.append(step_dur)
        tracker.log(data=metrics, step=step)
    del tracker  # Tracking.__del__ finishes the file logger
    raw = log_path.read_bytes()
    log_path.unlink()
    with gzip.GzipFile(out / f"{name}.jsonl.gz", "wb", mtime=0) as fh:  # mtime 0: reproducible bytes
        fh.write(raw)
    truth = {"run": name, "algo": algo, "fault": kind, "step_s": step_s, "steps": steps,
             "onset_step": onset if kind != "healthy" else None,
             "leak_mb_per_min": LEAK_MB_PER_MIN[step_s] if kind == "leak" else None, "times": times}
    (out / f"{name}.truth.json").write_text(json.dumps(truth))
    return truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for <run>.jsonl.gz and <run>.truth.json")
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--only", help="comma-separated run names (default: all)")
    p.add_argument("--kl-plateau", type=float, default=0.03, help="KL to the reference after its warm-up")
    p.add_argument("--kl-drift", type=float, default=KL_DRIFT_PER_STEP, help="KL rise per step with the penalty off")
    p.add_argument("--set", choices=("issue22", "families", "signals"), default="issue22",
                   help="issue22: the 30 runs of benchmarks/data/verl_real; families: issue 32's failure families "
                        "(benchmarks/verl_real_runs_families.py, for benchmarks/data/verl_real2); signals: the healthy "
                        "corpus and the fault sweep of the training-signal catalogue (benchmarks/verl_signal_corpus_runs.py, "
                        "for benchmarks/verl_signal_corpus.py)")
    p.add_argument("--healthy", type=int, default=200, help="--set signals: healthy runs in the corpus")
    p.add_argument("--shard", default="0/1", help="--set signals: K/N writes every N-th run from the K-th (parallel writers)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    if args.set == "families":
        from verl_real_runs_families import write_all  # a sibling of this file (sys.path[0])

        write_all(out, args.seed, only)
        return
    if args.set == "signals":
        from verl_signal_corpus_runs import write_all as write_signals  # a sibling of this file

        write_signals(out, args.seed, only, args.healthy, args.shard)
        return
    k = 0
    for step_s in CADENCES:
        for algo in ("ppo", "grpo"):
            for kind in KINDS:
                k += 1
                name = f"{algo}-{kind}-{int(step_s)}s"
                if only is None or name in only:
                    write_run(out, algo, kind, step_s, args.seed * 1000 + k, args.kl_plateau, args.kl_drift)
                    print(name, flush=True)


if __name__ == "__main__":
    main()
