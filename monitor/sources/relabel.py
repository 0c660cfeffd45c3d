"""Foreign metrics in our words, at the source edge (Prometheus' ``metric_relabel_configs``).

The one place where a name, its labels or its unit is rewritten; every source applies it before a
batch leaves it, so the store, the evaluator and the rules see only our names in base units:

- verl's logger keys (``actor/kl_loss``) through ``verl_keys.KEY_MAP``: ``verl_key``, called by the
  JSONL tail for each key of a record;
- verl 0.9's ``rl_insight`` gauges (``rl_insight_monitor_actor_kl_loss``), the same table:
  ``relabel``, for scraped or queried samples; their nodes speak verl's vocabulary;
- dcgm-exporter's units (framebuffer MiB, utilisation percent) into bytes and ratios: ``relabel``,
  for new samples and for the scrape cache's known values alike;
- vLLM's and SGLang's series (``vllm:*``, ``sglang:*``) get the server's address as ``server``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.model import Sample, SourceBatch
from monitor.sources import verl_keys
from monitor.sources.verl_keys import RL_INSIGHT_PREFIX, Mapped

MIB = 1024.0 * 1024.0
ROLLOUT_SERVER_PREFIXES = ("vllm:", "sglang:")  # verl's rollout engines' own /metrics names

# name -> factor to base units (the DCGM field docs state MiB for FB_* and % for *_UTIL).
UNIT_FACTORS: dict[str, float] = {
    "DCGM_FI_DEV_FB_USED": MIB,
    "DCGM_FI_DEV_FB_FREE": MIB,
    "DCGM_FI_DEV_FB_TOTAL": MIB,
    "DCGM_FI_DEV_FB_RESERVED": MIB,
    "DCGM_FI_DEV_GPU_UTIL": 0.01,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 0.01,
    "DCGM_FI_DEV_ENC_UTIL": 0.01,
    "DCGM_FI_DEV_DEC_UTIL": 0.01,
}


def verl_key(key: str) -> Mapped | None:
    """Our series for one key of a verl log record (None for keys that are not metrics)."""
    return verl_keys.map_key(key)


def series(name: str, labels: dict[str, str]) -> tuple[str, dict[str, str], float]:
    """(our name, labels, factor to base units) of one foreign series."""
    if name.startswith(RL_INSIGHT_PREFIX):
        m = verl_keys.map_rl_insight(name)
        if m is not None:
            return m.name, {**labels, **m.labels}, m.factor
    return name, labels, UNIT_FACTORS.get(name, 1.0)


def _sample(s: Sample, verl_nodes: set[str]) -> Sample:
    if s.name.startswith(ROLLOUT_SERVER_PREFIXES):
        return _server(s)
    if s.name.startswith(RL_INSIGHT_PREFIX):
        verl_nodes.add(s.labels.get("node", "unknown"))
    elif s.name not in UNIT_FACTORS:
        return s
    name, labels, factor = series(s.name, s.labels)
    return Sample(name, labels, s.value * factor, s.t)


def _server(s: Sample) -> Sample:
    """A rollout server's sample carries its address as ``server``: ``instance`` is scrape plumbing (never
    an alert label), and several servers share a node (one per tensor-parallel group), so the address is
    what tells one stalled server's alert from another's -- and what ``join_on: [server]`` joins."""
    if "server" in s.labels or not s.labels.get("instance"):
        return s
    return Sample(s.name, {**s.labels, "server": s.labels["instance"]}, s.value, s.t)


class KnownUnits:
    """One target's unit factors for the scrape cache's known series, kept while the known series are
    the same ones in the same order (a steady exposition): comparing two lists of the same objects is
    one C loop, looking 53 000 names up again every 5 s was 36 ms of Python per round."""

    def __init__(self) -> None:
        self.known: list[Any] = []
        self.factors: np.ndarray | None = None  # None: every factor is 1

    def scale(self, known: list[Any], values: np.ndarray) -> np.ndarray:
        if known != self.known:
            factors = [UNIT_FACTORS.get(s.name, 1.0) for s in known]
            self.known = known  # no copy: a batch's known list is never changed (a layout's serves every scrape)
            self.factors = np.asarray(factors) if any(f != 1.0 for f in factors) else None
        return values if self.factors is None else values * self.factors


def relabel(batch: SourceBatch, units: KnownUnits | None = None) -> set[str]:
    """Rename and convert ``batch`` in place; returns the nodes whose samples were in verl's words.

    Samples refused for their stamps are renamed too (their series are touched as alive). The scrape
    cache's known series are stored ones, so already ours: only their values need the unit factor
    (``units``: the target's memo of those factors)."""
    verl_nodes: set[str] = set()
    batch.samples = [_sample(s, verl_nodes) for s in batch.samples]
    if batch.refused:
        batch.refused = [_sample(s, verl_nodes) for s in batch.refused]
    if batch.known is not None:
        known, values, t = batch.known
        batch.known = (known, (units or KnownUnits()).scale(known, values), t)
    return verl_nodes


def relabel_columns(columns: list[tuple[str, dict[str, str], list[float], list[float]]]
                    ) -> list[tuple[str, dict[str, str], list[float], list[float]]]:
    """The same for a recording's columns (name, labels, times, values), as replay reads them."""
    out = []
    for name, labels, t, v in columns:
        ours, ours_labels, factor = series(name, labels)
        out.append((ours, ours_labels, t, v if factor == 1.0 else [x * factor for x in v]))
    return out

