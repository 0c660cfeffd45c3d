"""Monitor replay throughput: 24 h of 5 s samples for 100 series (both name families) through the
default rules, as `verl-monitor replay` runs them. Prints one JSON object as the last line.

    .venv/bin/python benchmarks/monitor_replay.py [--hours 24] [--series 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from monitor.cli import main as monitor_main

# A realistic mix per node: hardware series at 5 s on 8 GPUs from both families, host CPU, and the
# trainer's framework/algorithm series (also written at 5 s here, which over-states their real load).
HARDWARE = ["verl_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", "verl_gpu_utilization_ratio",
            "DCGM_FI_DEV_GPU_TEMP"]
TRAINER = ["verl_host_cpu_utilization_ratio", "verl_actor_tokens_per_second", "verl_kl_divergence",
           "verl_reward_std", "verl_reward_mean", "verl_rollout_buffer_size", "verl_heartbeat_timestamp_seconds",
           "verl_rollout_buffer_age_seconds"]


def build(n_series: int, hours: float, path: Path) -> int:
    rng = np.random.default_rng(0)
    t0 = 1_767_225_600.0
    t = t0 + np.arange(0, hours * 3600, 5.0)
    result = []
    node = 0
    while len(result) < n_series:
        host = f"gpu-{node:02d}"
        for name in TRAINER:
            base = {"verl_actor_tokens_per_second": 12000, "verl_kl_divergence": 0.02, "verl_reward_std": 0.5,
                    "verl_rollout_buffer_size": 5000, "verl_rollout_buffer_age_seconds": 60,
                    "verl_host_cpu_utilization_ratio": 0.6}.get(name, 1.0)
            v = t.copy() if name == "verl_heartbeat_timestamp_seconds" else base * (1 + rng.normal(0, 0.02, len(t)))
            labels = {"__name__": name, "instance": f"{host}:8000"}
            if name == "verl_rollout_buffer_size":
                labels["stage"] = "train"
            result.append({"metric": labels, "values": [[float(a), repr(float(b))] for a, b in zip(t, v, strict=True)]})
        for gpu in range(8):
            for name in HARDWARE:
                if len(result) >= n_series:
                    break
                scale = {"verl_gpu_memory_used_bytes": 40e9, "DCGM_FI_DEV_FB_USED": 40e9 / 2**20,
                         "verl_gpu_utilization_ratio": 0.8, "DCGM_FI_DEV_GPU_TEMP": 65}[name]
                v = scale * (1 + rng.normal(0, 0.01, len(t)))
                labels = {"__name__": name, "gpu": str(gpu)}
                labels.update({"Hostname": host} if name.startswith("DCGM") else {"instance": f"{host}:8000"})
                result.append({"metric": labels, "values": [[float(a), repr(float(b))] for a, b in zip(t, v, strict=True)]})
        node += 1
    result = result[:n_series]
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    return len(result) * len(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--series", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="only the JSON result line")
    ap.add_argument("--data", help="unused: this benchmark generates its input")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.json", Path(tmp) / "out.jsonl"
        samples = build(args.series, args.hours, inp)
        started, cpu0 = time.perf_counter(), time.process_time()
        rc = monitor_main(["replay", "--input", str(inp), "--output", str(out)])
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
        records = sum(1 for _ in out.open())
    res = {"benchmark": "monitor_replay", "hours": args.hours, "series": args.series, "samples": samples,
           "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
           "load_avg_1m": round(os.getloadavg()[0], 2), "samples_per_s": round(samples / wall), "records": records, "rc": rc}
    if not args.json:
        print(f"replayed {samples} samples ({args.series} series x {args.hours} h at 5 s) in {wall:.1f} s "
              f"wall, {cpu:.1f} s CPU (the wall time depends on how busy the machine is)", file=sys.stderr)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
