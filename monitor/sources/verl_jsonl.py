"""Tail of volcengine verl's ``file`` logger (``trainer.logger=[...,"file"]``): one JSON object per
line, ``{"step": N, "data": {"actor/ppo_kl": ..., ...}}`` (flat ``{key: value}`` lines are accepted
too). Keys are mapped onto our series names; unmapped numeric keys become ``verl_jsonl_<key>``.
verl writes no timestamp, so a line is stamped with ``timestamp``/``_timestamp`` if present, else
the clock time it was read at.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from monitor.model import Sample, SourceBatch, with_node

# verl key -> (our name, extra labels, factor). Documented in monitor/README.md.
KEY_MAP: dict[str, tuple[str, dict[str, str], float]] = {
    "actor/ppo_kl": ("verl_kl_divergence", {}, 1.0),
    "actor/kl_loss": ("verl_kl_divergence", {"source": "kl_loss"}, 1.0),
    "actor/reward_kl_penalty_coeff": ("verl_kl_coef", {}, 1.0),
    "actor/kl_coef": ("verl_kl_coef", {}, 1.0),
    "actor/entropy": ("verl_entropy", {}, 1.0),
    "actor/pg_clipfrac": ("verl_clip_fraction", {}, 1.0),
    "actor/pg_loss": ("verl_policy_loss", {}, 1.0),
    "actor/grad_norm": ("verl_grad_norm", {"model": "actor"}, 1.0),
    "critic/grad_norm": ("verl_grad_norm", {"model": "critic"}, 1.0),
    "critic/vf_loss": ("verl_critic_loss", {}, 1.0),
    "critic/score/mean": ("verl_reward_mean", {}, 1.0),
    "critic/score/std": ("verl_reward_std", {}, 1.0),
    "critic/advantages/var": ("verl_advantage_variance", {}, 1.0),
    "perf/throughput": ("verl_actor_tokens_per_second", {}, 1.0),
    "perf/max_memory_allocated_gb": ("verl_gpu_memory_used_bytes", {"gpu": "torch_max_allocated"}, 2.0**30),
    "training/global_step": ("verl_global_step", {}, 1.0),
}
# timing_s/<verl stage> -> verl_stage_seconds{stage=<our stage>}; other stages keep their own name.
STAGE_MAP = {"gen": "rollout", "reward": "reward", "ref": "reference", "values": "critic", "update_critic": "critic",
             "update_actor": "actor_update", "save_checkpoint": "checkpoint", "testing": "validation"}

_SAFE = re.compile(r"[^a-zA-Z0-9_]")


def map_record(record: dict, now: float, node: str | None, source: str, batch: SourceBatch) -> None:
    data = record.get("data") if isinstance(record.get("data"), dict) else record
    t = now
    for key in ("timestamp", "_timestamp", "time"):
        if isinstance(record.get(key), int | float):
            t = float(record[key])
            break
    step = record.get("step", data.get("training/global_step"))
    if isinstance(step, int | float) and "training/global_step" not in data:
        batch.samples.append(Sample("verl_global_step", with_node({}, node), float(step), t))
    for key, raw in data.items():
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            continue
        value = float(raw)
        if not math.isfinite(value):
            batch.error("nonfinite_value")
            continue
        if key in KEY_MAP:
            name, labels, factor = KEY_MAP[key]
            value *= factor
        elif key.startswith("timing_s/"):
            stage = key.split("/", 1)[1]
            name, labels = "verl_stage_seconds", {"stage": STAGE_MAP.get(stage, _SAFE.sub("_", stage))}
        elif key in ("step", "timestamp", "_timestamp", "time"):
            continue
        else:
            name, labels = "verl_jsonl_" + _SAFE.sub("_", key).strip("_").lower(), {}
        batch.samples.append(Sample(name, with_node(labels, node), value, t))


class JsonlTail:
    """Reads lines appended since the last poll; survives truncation/rotation (starts over)."""

    def __init__(self, path: str | Path, node: str | None = None) -> None:
        self.path = Path(path)
        self.node = node
        self._offset = 0
        self._partial = ""

    def poll(self, now: float) -> SourceBatch:
        batch = SourceBatch(f"jsonl:{self.path.name}")
        try:
            size = self.path.stat().st_size
            if size < self._offset:
                self._offset, self._partial = 0, ""
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            batch.error("file_missing")
            return batch
        except OSError:
            batch.error("read_error")
            return batch
        self._offset += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                batch.error("malformed_json")
                continue
            if not isinstance(record, dict):
                batch.error("malformed_json")
                continue
            map_record(record, now, self.node, batch.source, batch)
        return batch
