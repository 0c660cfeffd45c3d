"""Synthetic but realistic series for the monitor's tests: sample rates of the trainer's levels
(hardware 5 s, framework 30 s, algorithm per step ~10 s), Gaussian noise, sawtooth allocation cycles
(AR(1) wander comes from ``benchmarks.scenarios.ar1``). Each series can be produced under our verl_*
name or the DCGM_FI_* name."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import numpy as np

from monitor.evaluation.rules import load_rule_files
from monitor.replay import run_recording
from monitor.sources.recorded import from_columns

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MIB = 1024.0 * 1024.0

Column = tuple[str, dict[str, str], np.ndarray, np.ndarray]


def times(duration_s: float, step_s: float, start: float = T0) -> np.ndarray:
    return start + np.arange(0.0, duration_s, step_s)


def gpu_memory(t: np.ndarray, rng: np.random.Generator, leak_mb_per_min: float = 0.0, onset: float = T0,
               base: float = 40e9, swing: float = 8e9, period: float = 90.0, noise: float = 100e6) -> np.ndarray:
    """Sawtooth allocation cycle (rollout allocates, update frees) + noise + optional linear leak."""
    phase = ((t - T0) % period) / period
    leak = np.clip(t - onset, 0, None) / 60.0 * leak_mb_per_min * 1e6
    return base + swing * phase + rng.normal(0.0, noise, len(t)) + leak


def memory_column(family: str, t: np.ndarray, v_bytes: np.ndarray, node: str = "gpu-08") -> Column:
    if family == "verl":
        return "verl_gpu_memory_used_bytes", {"gpu": "0", "node": node}, t, v_bytes
    return "DCGM_FI_DEV_FB_USED", {"gpu": "0", "Hostname": node, "UUID": "GPU-x"}, t, v_bytes / MIB


def run(columns: list[Column], rules_path: str | None = None) -> list[dict]:
    rules = load_rule_files([rules_path] if rules_path else None)
    out = io.StringIO()
    run_recording(from_columns([(n, dict(lb), list(t), list(v)) for n, lb, t, v in columns], 0), rules, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def firing(records: list[dict], alertname: str) -> list[dict]:
    return [r for r in records if r["kind"] == "alert" and r["status"] == "firing"
            and r["labels"]["alertname"] == alertname]


def first_fire_time(records: list[dict], alertname: str) -> float | None:
    from datetime import datetime

    hits = firing(records, alertname)
    if not hits:
        return None
    return datetime.fromisoformat(hits[0]["startsAt"].replace("Z", "+00:00")).timestamp()


Gen = Callable[[np.random.Generator], list[Column]]
