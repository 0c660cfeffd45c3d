"""The GPU path on a real accelerator, as one prepared script: one JSON line per check.

    python benchmarks/gpu_check.py [--only NAME,...] [--budget-s 480] [--workdir DIR]

Run it from the repository root on a machine with a CUDA device and a CUDA torch already installed (it
installs nothing and reaches no network). Checks, in order:

1. ``ppo_cuda_bf16``     ppo_tiny on ``cuda`` under torchrun (1 rank, FSDP2: bf16 compute, fp32 reduce),
                         30 steps: reward rising (last 10 steps' mean over the first 10's), median step
                         time, peak ``torch.cuda.max_memory_allocated``.
2. ``fsdp_kill9_resume`` FSDP2 on the one device, sharded async checkpoints, SIGKILL inside step 5,
                         ``--resume-or-start``, final parameter digest against an uninterrupted run (with
                         ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` and the trainer's deterministic algorithms); when
                         the digests differ, the largest parameter difference is reported instead.
3. ``metrics_vs_nvml``   the trainer's ``/metrics`` GPU gauges (memory, utilisation, temperature) against
                         NVML read at the same moment, then the monitor's NVML sampler and its
                         ``nvidia-smi dmon`` parser on the real device.
4. ``leak_paged``        a leak injected on the actor's CUDA device (tensors kept across steps) paged as
                         MemoryLeakSuspected by a live monitor (the demo's short-window profile), and a
                         healthy CUDA run paging no MemoryLeakSuspected.
5. ``vllm``              whether ``import vllm`` works here (nothing is installed when it does not).

Without a CUDA device every check prints a ``skipped`` line with the reason and the script exits 0; with
one it exits 0 when every check that ran passed, else 1. Figures go to benchmarks/RESULTS.md by hand,
with the device line this script prints first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project as brought, installed or not (the GPU machines install nothing)
CHECKS = ("ppo_cuda_bf16", "fsdp_kill9_resume", "metrics_vs_nvml", "leak_paged", "vllm")
CUDA = ["actor.device=cuda", "critic.device=cuda", "reference.device=cuda", "reward.device=cpu"]
# --rehearse-on-cpu: the same runs on the CPU (fp32, gloo), to try the script's plumbing where no GPU is
CPU = ["actor.device=cpu", "critic.device=cpu", "reference.device=cpu", "reward.device=cpu"]
FSDP = ["actor.strategy=fsdp", "critic.strategy=fsdp", "data.dedup=false"]
STEP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*\bstep (\d+)/\d+ \|")
FINISHED = re.compile(r"finished step=(\d+) reward_first10=([-\d.]+) reward_last10=([-\d.]+)")
PEAK = re.compile(r"^gpu_check: max_memory_allocated=(\d+) bf16_supported=(\w+)")
METRICS_URL = re.compile(r"^metrics: (http://\S+)")
# Tolerances of check 3: NVML framebuffer "used" counts every process and moves as the caching allocator
# grows, so the trainer's gauge (sampled every --metrics-interval) and a read a moment later may differ by a
# step's allocations; temperature moves a degree or two between reads.
MEM_TOLERANCE = 0.05
MEM_TOLERANCE_BYTES = 512 << 20
TEMP_TOLERANCE_C = 3.0


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def device_line() -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        return {"check": "device", "cuda": False, "reason": f"torch not importable: {exc}"}
    line: dict[str, Any] = {"check": "device", "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                            "cuda": bool(torch.cuda.is_available())}
    if line["cuda"]:
        line.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                    bf16=torch.cuda.is_bf16_supported())
    else:
        line["reason"] = (f"no CUDA device: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'}) "
                          "sees none")
    return line


def trainer_entry(argv: list[str]) -> int:
    """Run verl-train in this process, then print the allocator's peak (verl-train does not export it)."""
    import torch

    from verl.cli.train import main as train_main

    rc = train_main(argv)
    if torch.cuda.is_available():
        print(f"gpu_check: max_memory_allocated={torch.cuda.max_memory_allocated()} "
              f"bf16_supported={torch.cuda.is_bf16_supported()}", flush=True)
    return rc


def launcher(ranks: int = 1) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(timeout, 1.0),
                          env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout + proc.stderr


def step_seconds(out: str) -> float | None:
    from datetime import datetime

    stamps = [datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
              for m in (STEP_LINE.match(ln) for ln in out.splitlines()) if m]
    gaps = [b - a for a, b in zip(stamps[4:], stamps[5:], strict=False)]  # after warm-up
    return round(statistics.median(gaps), 4) if gaps else None


def check_ppo(work: Path, left: float) -> dict[str, Any]:
    cmd = [*launcher(), str(Path(__file__).resolve()), "--trainer-entry", "--config", "ppo_tiny", *CUDA, *FSDP,
           "trainer.total_steps=30", "actor.lr=0.002", "critic.lr=0.002", "--checkpoint-dir", str(work / "ckpt")]
    rc, out = run(cmd, left)
    fin, peak = FINISHED.search(out), next((PEAK.match(ln) for ln in out.splitlines() if PEAK.match(ln)), None)
    rec: dict[str, Any] = {"rc": rc, "median_step_s": step_seconds(out)}
    if fin:
        rec.update(steps=int(fin[1]), reward_first10=float(fin[2]), reward_last10=float(fin[3]))
    if peak:
        rec.update(max_memory_allocated_mib=round(int(peak[1]) / 2**20, 1), bf16=peak[2] == "True")
    on_cuda = CUDA[0] == "actor.device=cuda"
    rec["ok"] = bool(rc == 0 and fin and int(fin[1]) == 30 and float(fin[3]) > float(fin[2])
                     and (peak or not on_cuda))
    if not rec["ok"]:
        rec["tail"] = out[-1500:]
    return rec


def check_resume(work: Path, left: float) -> dict[str, Any]:
    from verl.checkpoint.digest import digest_checkpoint, read_full_part

    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # cuBLAS's deterministic workspace (set before CUDA starts)
    base = ["-m", "verl.cli.train", "--config", "ppo_tiny", *CUDA, *FSDP, "trainer.total_steps=8",
            "checkpoint.interval=2", "checkpoint.async_save=true", "reward.deadline_multiplier=0"]
    t0 = time.monotonic()
    ref, killed = work / "uninterrupted", work / "killed"
    rc_ref, out_ref = run([*launcher(), *base, "--checkpoint-dir", str(ref)], left / 3, env)
    rc_kill, out_kill = run([*launcher(), *base, "faults.kill_trainer_at_step=5", "--checkpoint-dir", str(killed)],
                            left / 3, env)
    rc_res, out_res = run([*launcher(), *base, "--checkpoint-dir", str(killed), "--resume-or-start"],
                          left - (time.monotonic() - t0), env)
    resumed = re.search(r"resumed from step (\d+)", out_res)
    rec: dict[str, Any] = {"rc": [rc_ref, rc_kill, rc_res], "killed_at_step": 5,
                           "resumed_from": int(resumed[1]) if resumed else None,
                           "determinism": "CUBLAS_WORKSPACE_CONFIG=:4096:8, trainer.deterministic "
                                          "(torch.use_deterministic_algorithms), seeded sampling"}
    if rc_ref != 0 or rc_res != 0 or rc_kill == 0:
        rec.update(ok=False, tail=(out_ref if rc_ref else out_res if rc_res else out_kill)[-1500:])
        return rec
    a, b = ref / "global_step_8", killed / "global_step_8"
    rec["digest_equal"] = digest_checkpoint(a) == digest_checkpoint(b)
    if not rec["digest_equal"]:
        diff = 0.0
        for part in ("actor", "critic"):
            ta, tb = read_full_part(a / part), read_full_part(b / part)
            diff = max([diff, *((ta[k].float() - tb[k].float()).abs().max().item() for k in ta)])
        rec["max_abs_param_diff"] = diff
    rec["ok"] = bool(resumed) and rec["digest_equal"]
    return rec


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'^(verl_gpu_(?:memory_used_bytes|utilization_ratio|temperature_celsius))\{[^}]*gpu="0"[^}]*\} '
                     r"(\S+)", line)
        if m:
            values[m[1]] = float(m[2])
    return values


def check_metrics(work: Path, left: float) -> dict[str, Any]:
    import pynvml

    from monitor.sources.dmon import DmonParser
    from monitor.sources.nvml import NvmlSampler

    cmd = [sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny", *CUDA, "trainer.total_steps=100000",
           "actor.tiny.n_layer=6", "actor.tiny.n_embd=512", "actor.tiny.n_head=8", "data.batch_size=64",
           "actor.ppo_mini_batch_size=64", "critic.ppo_mini_batch_size=64", "--metrics-port", "0",
           "--metrics-interval", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rec: dict[str, Any] = {}
    try:
        url = None
        assert proc.stdout is not None
        deadline = time.monotonic() + min(120.0, left)
        for line in proc.stdout:
            m = METRICS_URL.match(line)
            if m:
                url = m[1]
                break
            if time.monotonic() > deadline:
                break
        if url is None:
            return {"ok": False, "error": "the trainer never printed its metrics URL"}
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(10)  # training under way: the SM counter covers busy periods
        pairs = []
        for _ in range(5):
            ours = scrape(url)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).used
            pairs.append((ours, mem, pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
                          float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))))
            time.sleep(1.0)
        mem_err = max(abs(o.get("verl_gpu_memory_used_bytes", 0.0) - m) for o, m, _, _ in pairs)
        mem_ref = max(m for _, m, _, _ in pairs)
        temp_err = max(abs(o.get("verl_gpu_temperature_celsius", -1e9) - t) for o, _, _, t in pairs)
        util = max(o.get("verl_gpu_utilization_ratio", 0.0) for o, _, _, _ in pairs)
        rec.update(memory_used_mib=round(mem_ref / 2**20, 1), memory_max_diff_mib=round(mem_err / 2**20, 1),
                   temperature_max_diff_c=temp_err, utilization_max=util,
                   nvml_utilization_max=max(u for _, _, u, _ in pairs),
                   tolerance=f"memory {MEM_TOLERANCE:.0%} or {MEM_TOLERANCE_BYTES >> 20} MiB, "
                             f"temperature {TEMP_TOLERANCE_C:g} C, utilisation > 0")
        ok = (mem_err <= max(MEM_TOLERANCE * mem_ref, MEM_TOLERANCE_BYTES) and temp_err <= TEMP_TOLERANCE_C
              and util > 0 and all(o.get("verl_gpu_memory_used_bytes", 0) > 0 for o, _, _, _ in pairs))
        sampler = NvmlSampler(node="gpu-check")
        batch = sampler.poll(time.time())
        sampler.close()
        nvml_names = {s.name for s in batch.samples if s.value > 0}
        rec["monitor_nvml_series"] = sorted(nvml_names)
        ok = ok and {"verl_gpu_memory_used_bytes", "verl_gpu_temperature_celsius"} <= nvml_names
        try:
            dmon = subprocess.run(["nvidia-smi", "dmon", "-c", "2", "-s", "pucm"], capture_output=True, text=True,
                                  timeout=30)
            parsed = DmonParser(node="gpu-check").feed(dmon.stdout.splitlines(), time.time())
            fb = [s.value for s in parsed.samples if s.name == "verl_gpu_memory_used_bytes" and s.labels["gpu"] == "0"]
            rec["dmon_memory_used_mib"] = round(fb[-1] / 2**20, 1) if fb else None
            rec["dmon_parse_errors"] = dict(parsed.errors)
            ok = ok and bool(fb) and abs(fb[-1] - mem_ref) <= max(MEM_TOLERANCE * mem_ref, MEM_TOLERANCE_BYTES)
        except FileNotFoundError:
            rec["dmon"] = "nvidia-smi not on PATH: dmon source not checked"
        rec["ok"] = bool(ok)
        return rec
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def watch(work: Path, seconds: float, leak: bool) -> dict[str, Any]:
    from harness.stack import Stack, StackOptions

    args = ("--config", "ppo_tiny", "--metrics-port", "0", "--metrics-interval", "1", *CUDA,
            "trainer.total_steps=100000", "kl_coef=0.2",  # the demo's: KL stays put on a healthy run
            *(("faults.gpu_leak_mb_per_min=600",) if leak else ()))
    opts = StackOptions(workdir=work, echo=False, trainer_args=args)
    started = time.monotonic()
    with Stack(opts) as stack:
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            if leak and any(e["alertname"] == "MemoryLeakSuspected" and e["status"] == "firing"
                            for e in stack.journal.of("alert")):
                break
        fired = [e for e in stack.journal.of("alert") if e["status"] == "firing"]
        messages = [e["text"] for e in stack.journal.of("message")]
    leak_at = next((e["t"] for e in fired if e["alertname"] == "MemoryLeakSuspected"), None)
    return {"leak_paged_after_s": leak_at, "alerts": sorted({e["alertname"] for e in fired}),
            "leak_message_names_gpu": any("MemoryLeakSuspected" in m and "GPU 0" in m for m in messages)}


def check_leak(work: Path, left: float) -> dict[str, Any]:
    leak = watch(work / "leak", min(150.0, left * 0.6), leak=True)
    healthy = watch(work / "healthy", min(75.0, max(left * 0.3, 10.0)), leak=False)
    return {"leak": leak, "healthy": healthy, "injected_mb_per_min": 600,
            "ok": leak["leak_paged_after_s"] is not None and "MemoryLeakSuspected" not in healthy["alerts"]}


def check_vllm(work: Path, left: float) -> dict[str, Any]:
    rc, out = run([sys.executable, "-c", "import vllm; print(vllm.__version__)"], min(left, 120.0))
    if rc != 0:
        last = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
        return {"ok": True, "available": False, "reason": f"import vllm failed here: {last[:300]}; not installed "
                                                          "(this script installs nothing)"}
    return {"ok": True, "available": True, "version": out.strip().splitlines()[-1],
            "engine_run": "not run: rollout.engine=vllm needs a local HF model directory and none ships here"}


RUNNERS: dict[str, Callable[[Path, float], dict[str, Any]]] = {
    "ppo_cuda_bf16": check_ppo, "fsdp_kill9_resume": check_resume, "metrics_vs_nvml": check_metrics,
    "leak_paged": check_leak, "vllm": check_vllm}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--trainer-entry"]:
        return trainer_entry(argv[1:])
    p = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py", description=__doc__.splitlines()[0],
                                epilog="Exit status: 0 all checks passed or skipped (no CUDA device), 1 a check "
                                       "failed, 2 bad arguments.")
    p.add_argument("--only", default=",".join(CHECKS), help="comma-separated checks: " + ", ".join(CHECKS))
    p.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget for all checks (default 480)")
    p.add_argument("--workdir", help="keep checkpoints and configs here (default: a temp dir)")
    p.add_argument("--rehearse-on-cpu", action="store_true",
                   help="run checks 1, 2 and 4 on the CPU (no bf16, host-memory leak) to try the script here")
    args = p.parse_args(argv)
    chosen = [c for c in args.only.split(",") if c]
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown or not chosen:
        print(f"gpu_check: --only {args.only}: unknown check {unknown[0] if unknown else '(none)'!r}; choose from "
              + ", ".join(CHECKS), file=sys.stderr)
        return 2
    if not args.budget_s > 0:
        print(f"gpu_check: --budget-s {args.budget_s}: must be > 0 seconds", file=sys.stderr)
        return 2
    device = device_line()
    if args.rehearse_on_cpu:
        CUDA[:] = CPU
        device.update(cuda=False, rehearsal="on the CPU: devices cpu, fp32; NVML and vllm checks skipped")
        chosen = [c for c in chosen if c not in ("metrics_vs_nvml", "vllm")]
    emit(device)
    if not device["cuda"] and not args.rehearse_on_cpu:
        for name in chosen:
            emit({"check": name, "skipped": device["reason"]})
        return 0
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    deadline = time.monotonic() + args.budget_s
    failed = False
    for name in chosen:
        left = deadline - time.monotonic()
        if left < 10:
            emit({"check": name, "ok": False, "error": f"budget of {args.budget_s:g} s spent before this check"})
            failed = True
            continue
        t0 = time.monotonic()
        try:
            rec = RUNNERS[name](work / name, left)
        except Exception as exc:  # one check's failure is its line; the others still run
            rec = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        emit({"check": name, **rec, "seconds": round(time.monotonic() - t0, 1)})
        failed = failed or not rec.get("ok", False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
