"""Straggler scores of a torchrun job's ranks, from the per-rank stage times its global rank 0 exports
(``verl_rank_stage_seconds{rank,node,stage}``, gathered by the trainer every step; issue 33.6).

NVIDIA Resiliency Extension-style (its straggler detector scores each rank relative to its peers and to
its own past; nothing copied): per step and stage,

- ``verl_rank_straggler_score``: the rank's time over its peers' (the median of all ranks' times of that
  stage; with two ranks the other one's): 1 = like its peers, 3 = three times slower; the paged one;
- ``verl_rank_slowdown_ratio``: the rank's time over the median of its own last ``HISTORY`` times of that
  stage (evidence: a rank slow from its first step has ratio 1, a whole job slowing down has score 1).

Waiting is not straggling: the peers of a slow rank wait for it inside their next collective (the DDP
gradient all-reduce of the critic or actor update), so that later stage stands out on every *other* rank.
Within one step only the earliest stage, in execution order, where a rank is more than ``MIN_EXCESS_S``
over its peers is blamed; the other ranks' excess in later stages is their wait and scores 1. A rank slow
inside the very stage that holds the collective is not told apart (every rank leaves it together);
NVRx times the compute kernels for that, which a /metrics scrape cannot.

A step is scored once: a scrape that reads the same times as the one before (no step finished in
between) adds nothing. Computed here, at the source edge, because one scrape holds one step of every
rank; own code because no library scores peers from Prometheus samples.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

from monitor.model import Sample, SourceBatch

STAGE_SERIES = "verl_rank_stage_seconds"
# our trainer's stages in the order a step runs them (verl/trainer/ppo_step.py; the catalogue's STAGES are
# in dashboard order); a stage not named here sorts last
STEP_ORDER = ("dataloader", "rollout", "reward", "reference", "old_log_prob", "critic_values", "advantage",
              "critic", "actor_update", "checkpoint")
MIN_EXCESS_S = 0.05   # a smaller difference between ranks is scheduling noise, never a straggler
FLOOR_S = 0.01        # the least peer time divided by: a stage of ~0 s on the peers is not "infinitely" slower
HISTORY = 32          # own past: the last 32 steps of that stage
MIN_HISTORY = 4
MAX_RANKS = 256       # ranks scored per target (beyond: counted, not scored: ~0.1 s of Python per step)
# verl's own record of the data-parallel load (utils/seqlen_balancing.py log_seqlen_unbalance, 0.9.1, with
# trainer.balance_batch): token sums per dp rank, global_seqlen/balanced_max over global_seqlen/mean is how
# far the heaviest rank's share is above an even split *after* verl balanced the batch
SEQLEN_MAX, SEQLEN_MEAN = "verl_jsonl_global_seqlen_balanced_max", "verl_jsonl_global_seqlen_mean"
DERIVED_SERIES = ("verl_rank_straggler_score", "verl_rank_slowdown_ratio", "verl_rank_load_imbalance_ratio")


def _peer_medians(values: dict[str, float]) -> dict[str, float]:
    """Each rank's peer reference: with two ranks the other one's time, else the median of all ranks'
    (one sort per stage, not one per rank: the median barely moves with the rank itself in it)."""
    if len(values) == 2:
        a, b = values
        return {a: values[b], b: values[a]}
    med = statistics.median(values.values())
    return dict.fromkeys(values, med)


def _order(stage: str) -> int:
    return STEP_ORDER.index(stage) if stage in STEP_ORDER else len(STEP_ORDER)


class StragglerScores:
    """One target's scorer (its own past lives here, per rank and stage)."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] | None = None
        self._past: dict[tuple[str, str], deque[float]] = {}

    def _stage_times(self, batch: SourceBatch) -> tuple[dict[str, dict[str, tuple[float, dict[str, str]]]], float]:
        by_stage: dict[str, dict[str, tuple[float, dict[str, str]]]] = {}
        t = -1.0
        for s in batch.samples:
            if s.name == STAGE_SERIES and "rank" in s.labels and "stage" in s.labels:
                by_stage.setdefault(s.labels["stage"], {})[s.labels["rank"]] = (s.value, s.labels)
                t = max(t, s.t)
        if batch.known is not None:  # the scrape cache's series: stored ones, values in this scrape
            known, values, kt = batch.known
            for series, value in zip(known, values.tolist(), strict=True):
                if series.name == STAGE_SERIES and "rank" in series.labels and "stage" in series.labels:
                    by_stage.setdefault(series.labels["stage"], {})[series.labels["rank"]] = (value, series.labels)
                    t = max(t, kt)
        return by_stage, t

    def derive(self, batch: SourceBatch) -> None:
        """Adds the scores of a new step to ``batch`` (nothing when the batch holds no per-rank times of
        at least two ranks, or the same step as the last one)."""
        by_stage, t = self._stage_times(batch)
        if not by_stage or max(len(r) for r in by_stage.values()) < 2:
            return
        if max(len(r) for r in by_stage.values()) > MAX_RANKS:
            batch.error("straggler_ranks_over_cap")  # the own-past memory stays bounded
            return
        key = tuple(sorted((st, r, v) for st, ranks in by_stage.items() for r, (v, _) in ranks.items()))
        if key == self._last:
            return
        self._last = key
        blamed: str | None = None
        blamed_stage = ""
        for stage in sorted(by_stage, key=_order):
            ranks = by_stage[stage]
            if len(ranks) < 2:
                continue
            medians = _peer_medians({r: v for r, (v, _) in ranks.items()})
            if blamed is None:
                excess = {r: v - medians[r] for r, (v, _) in ranks.items()}
                worst = max(excess, key=lambda r: excess[r])
                if excess[worst] >= MIN_EXCESS_S:
                    blamed, blamed_stage = worst, stage
            for rank, (value, labels) in ranks.items():
                waiting = blamed is not None and rank != blamed and stage != blamed_stage
                score = 1.0 if waiting else value / max(medians[rank], FLOOR_S)
                batch.samples.append(Sample("verl_rank_straggler_score", dict(labels), score, t))
                past = self._past.setdefault((rank, stage), deque(maxlen=HISTORY))
                ratio = value / max(statistics.median(past), FLOOR_S) if len(past) >= MIN_HISTORY else 1.0
                batch.samples.append(Sample("verl_rank_slowdown_ratio", dict(labels), ratio, t))
                past.append(value)


def seqlen_imbalance(batch: SourceBatch) -> None:
    """``verl_rank_load_imbalance_ratio`` per verl log record that has both balance keys (same time)."""
    records: dict[float, dict[str, Sample]] = {}
    for s in batch.samples:
        if s.name in (SEQLEN_MAX, SEQLEN_MEAN):
            records.setdefault(s.t, {})[s.name] = s
    for t, keys in records.items():
        if len(keys) == 2 and keys[SEQLEN_MEAN].value > 0:
            labels = {k: v for k, v in keys[SEQLEN_MAX].labels.items()}
            batch.samples.append(Sample("verl_rank_load_imbalance_ratio", labels,
                                        keys[SEQLEN_MAX].value / keys[SEQLEN_MEAN].value, t))
