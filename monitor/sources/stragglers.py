"""Straggler scores of a torchrun job's ranks, from the per-rank stage times its global rank 0 exports
(gathered by the trainer every step): each stage's wall time ``verl_rank_stage_seconds{rank,node,stage}``
and, from our trainer, its split into the rank's own work ``verl_rank_stage_compute_seconds`` and the time
it sat blocked in collectives ``verl_rank_stage_wait_seconds``.

NVIDIA Resiliency Extension-style (its straggler detector scores each rank's own sections, apart from
communication, relative to its peers and to its own past; nothing copied): per step and stage,

- ``verl_rank_straggler_score``: the rank's compute time over its peers' (the median of all ranks'; with
  two ranks the other one's): 1 = like its peers, 3 = three times slower; the paged one;
- ``verl_rank_slowdown_ratio``: the rank's time over the median of its own last ``HISTORY`` times of that
  stage (evidence: a rank slow from its first step has ratio 1, a whole job slowing down has score 1);
- ``verl_rank_peer_wait_seconds`` / ``verl_rank_peer_wait_share`` (per rank, no stage): how long the other
  ranks' median wait in collectives this step exceeds this rank's own, in seconds and as a share of their
  step -- what a straggler costs the job (its arrival skew at the step's collectives).

Waiting is not straggling: a collective returns when the last rank arrives, so the fast ranks' wall time of
a stage with a collective equals the slow one's. The compute split tells them apart wherever the slow work
is. Times without the split (another exporter) are scored on wall time, and there the peers' wait in a
later stage is not blamed on them: within one step only the earliest stage, in execution order, where a
rank is more than ``MIN_EXCESS_S`` over its peers is blamed (a rank slow inside the very stage that holds
the collective is then not told apart).

Noise is nobody's fault: a rank's time is the median of its steps of the last ``SMOOTH_S`` seconds, and of
at least its last ``SMOOTH`` (a rank descheduled for a second or two on a loaded host is not a straggler; a
real one is once it has been slow for half that window; the first ``WARMUP`` steps a rank runs a stage,
its one-time set-up, score at most 1), and a rank less than
``MIN_EXCESS_S`` over its peers scores at most 1 whatever the ratio (a 40 ms stage at 15 ms on the peer
is 2.7x and means nothing). Times that are not finite, negative or over ``MAX_STAGE_S`` are dropped and
counted, never scored. The own past is bounded: ``MAX_PAST_SERIES`` (rank, stage) histories, and one not
seen for ``IDLE_STEPS`` scored steps is forgotten (a stage label that changes every step).

A step is scored once: a scrape that reads the same times as the one before (no step finished in
between) adds nothing. Computed here, at the source edge, because one scrape holds one step of every
rank; own code because no library scores peers from Prometheus samples.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from monitor.model import Sample, SourceBatch

STAGE_SERIES = "verl_rank_stage_seconds"
COMPUTE_SERIES = "verl_rank_stage_compute_seconds"
WAIT_SERIES = "verl_rank_stage_wait_seconds"
STEP_SERIES = "verl_rank_step_seconds"
_READ = (STAGE_SERIES, COMPUTE_SERIES, WAIT_SERIES)
# our trainer's stages in the order a step runs them (verl/trainer/ppo_step.py; the catalogue's STAGES are
# in dashboard order); a stage not named here sorts last
STEP_ORDER = ("dataloader", "rollout", "reward", "reference", "old_log_prob", "critic_values", "advantage",
              "critic", "actor_update", "checkpoint")
MIN_EXCESS_S = 0.15   # a smaller difference between ranks is scheduling noise, never a straggler
FLOOR_S = 0.01        # the least peer time divided by: a stage of ~0 s on the peers is not "infinitely" slower
MAX_STAGE_S = 7 * 86400.0  # a stage time beyond a week is a broken exporter, not a slow rank
SMOOTH_S = 10.0       # a rank's scored time: the median of its times of that stage in the last 10 s...
SMOOTH = 3            # ...and of at least its last 3 (steps longer than 10 s: a hiccup is small beside them)
HISTORY = 64          # own past: the last 64 steps of that stage
MIN_HISTORY = 4
WARMUP = 5            # a (rank, stage)'s first steps: allocation, first calls, compilation
MAX_RANKS = 256       # ranks scored per target (beyond: counted, not scored: ~0.1 s of Python per step)
MAX_PAST_SERIES = 4096  # (rank, stage) histories kept: 256 ranks x 16 stages
IDLE_STEPS = 64       # a (rank, stage) history not seen for this many scored steps is dropped
# verl's own record of the data-parallel load (utils/seqlen_balancing.py log_seqlen_unbalance, 0.9.1, with
# trainer.balance_batch): token sums per dp rank, global_seqlen/balanced_max over global_seqlen/mean is how
# far the heaviest rank's share is above an even split *after* verl balanced the batch
SEQLEN_MAX, SEQLEN_MEAN = "verl_jsonl_global_seqlen_balanced_max", "verl_jsonl_global_seqlen_mean"
DERIVED_SERIES = ("verl_rank_straggler_score", "verl_rank_slowdown_ratio", "verl_rank_load_imbalance_ratio",
                  "verl_rank_peer_wait_seconds", "verl_rank_peer_wait_share")

Times = dict[str, dict[str, dict[str, tuple[float, dict[str, str]]]]]  # series -> stage -> rank -> (value, labels)


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


def _sane(value: float) -> bool:
    return math.isfinite(value) and 0.0 <= value <= MAX_STAGE_S


class StragglerScores:
    """One target's scorer (its own past lives here, per rank and stage)."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] | None = None
        self._past: dict[tuple[str, str], deque[tuple[float, float]]] = {}  # (rank, stage) -> (t, seconds)
        self._seen: dict[tuple[str, str], int] = {}  # (rank, stage) -> the scored step it was last in
        self._steps = 0
        # the scrape cache's known list last seen and, of the series read here, their positions, names and
        # labels: a steady exposition hands the same list every scrape, and its ~270 names were looked at
        # again each time (and each read series' labels rebuilt from its key: ~2 % of the monitor's CPU)
        self._known: list[Any] | None = None
        self._read_at: list[tuple[int, str, dict[str, str]]] = []

    def _times(self, batch: SourceBatch) -> tuple[Times, dict[str, float], float]:
        times: Times = {name: {} for name in _READ}
        steps: dict[str, float] = {}
        t = -1.0
        bad = 0

        def add(name: str, labels: dict[str, str], value: float, at: float) -> None:
            nonlocal t, bad
            if not _sane(value):
                bad += 1
            elif name == STEP_SERIES:
                steps[labels.get("rank", "")] = value
            elif "rank" in labels and "stage" in labels:
                times[name].setdefault(labels["stage"], {})[labels["rank"]] = (value, labels)
                t = max(t, at)

        for s in batch.samples:
            if s.name in _READ or s.name == STEP_SERIES:
                add(s.name, s.labels, s.value, s.t)
        if batch.known is not None:  # the scrape cache's series: stored ones, values in this scrape
            known, values, kt = batch.known
            if known is not self._known:
                self._known = known
                self._read_at = [(i, s.name, s.labels) for i, s in enumerate(known)
                                 if s.name in _READ or s.name == STEP_SERIES]
            if self._read_at:
                listed = values.tolist()
                for i, name, labels in self._read_at:
                    add(name, labels, listed[i], kt)
        if bad:
            batch.error("straggler_stage_time_invalid", bad)
        return times, steps, t

    def derive(self, batch: SourceBatch) -> None:
        """Adds the scores of a new step to ``batch`` (nothing when the batch holds no per-rank times of
        at least two ranks, or the same step as the last one)."""
        times, steps, t = self._times(batch)
        wall = times[STAGE_SERIES]
        if not wall or max(len(r) for r in wall.values()) < 2:
            return
        if max(len(r) for r in wall.values()) > MAX_RANKS:
            batch.error("straggler_ranks_over_cap")  # the own-past memory stays bounded
            return
        key = tuple(sorted((name, st, r, v) for name, by_stage in times.items() for st, ranks in by_stage.items()
                           for r, (v, _) in ranks.items()))
        if key == self._last:
            return
        self._last = key
        self._steps += 1
        blamed: str | None = None
        blamed_stage = ""
        for stage in sorted(wall, key=_order):
            compute = times[COMPUTE_SERIES].get(stage, {})
            split = len(compute) >= 2 and compute.keys() == wall[stage].keys()
            ranks = compute if split else wall[stage]
            if len(ranks) < 2:
                continue
            smoothed = {r: self._smoothed(r, stage, v, t, batch) for r, (v, _) in ranks.items()}
            medians = _peer_medians(smoothed)
            warm = all(len(self._past.get((r, stage), ())) > WARMUP for r in ranks)
            if not split and blamed is None:
                excess = {r: smoothed[r] - medians[r] for r in ranks}
                worst = max(excess, key=lambda r: excess[r])
                if excess[worst] >= MIN_EXCESS_S:
                    blamed, blamed_stage = worst, stage
            for rank, (value, labels) in ranks.items():
                waiting = not split and blamed is not None and rank != blamed and stage != blamed_stage
                ratio = smoothed[rank] / max(medians[rank], FLOOR_S)
                over = warm and smoothed[rank] - medians[rank] >= MIN_EXCESS_S
                score = 1.0 if waiting else ratio if over else min(ratio, 1.0)
                batch.samples.append(Sample("verl_rank_straggler_score", dict(labels), score, t))
                past = self._past.get((rank, stage))
                if past and len(past) > MIN_HISTORY:  # this step's time is in it already: the ones before
                    slowdown = value / max(statistics.median(v for _, v in list(past)[:-1]), FLOOR_S)
                else:
                    slowdown = 1.0
                batch.samples.append(Sample("verl_rank_slowdown_ratio", dict(labels), slowdown, t))
        self._peer_waits(times, steps, batch, t)
        self._forget_idle()

    def _smoothed(self, rank: str, stage: str, value: float, t: float, batch: SourceBatch) -> float:
        """The median of this rank's recent times of the stage, this step's included (and recorded)."""
        key = (rank, stage)
        past = self._past.get(key)
        if past is None:
            if len(self._past) >= MAX_PAST_SERIES:
                batch.error("straggler_history_over_budget")
                return value
            past = self._past[key] = deque(maxlen=HISTORY)
        past.append((t, value))
        self._seen[key] = self._steps
        recent = [v for at, v in past if at >= t - SMOOTH_S]
        if len(recent) < SMOOTH:
            recent = [v for _, v in list(past)[-SMOOTH:]]
        return statistics.median(recent)

    def _peer_waits(self, times: Times, steps: dict[str, float], batch: SourceBatch, t: float) -> None:
        """Per rank: the peers' median wait in this step's collectives beyond its own, and that over their
        step time (a straggler's is the time the job loses to it; every other rank's is ~0)."""
        waits: dict[str, float] = {}
        nodes: dict[str, str] = {}
        for ranks in times[WAIT_SERIES].values():
            for rank, (value, labels) in ranks.items():
                waits[rank] = waits.get(rank, 0.0) + value
                nodes[rank] = labels.get("node", "")
        if len(waits) < 2:  # another exporter, no split: nothing known of the wait (the page still names the rank)
            ranks = {r: labels.get("node", "") for by_rank in times[STAGE_SERIES].values()
                     for r, (_, labels) in by_rank.items()}
            waits, nodes = dict.fromkeys(ranks, 0.0), ranks
        if not steps:  # another exporter: a rank's step is the sum of its stages
            for ranks in times[STAGE_SERIES].values():
                for rank, (value, _) in ranks.items():
                    steps[rank] = steps.get(rank, 0.0) + value
        for rank in waits:
            peers = [r for r in waits if r != rank]
            extra = max(0.0, statistics.median(waits[r] for r in peers) - waits[rank])
            step = statistics.median(steps.get(r, 0.0) for r in peers)
            labels = {"rank": rank, "node": nodes[rank]}
            batch.samples.append(Sample("verl_rank_peer_wait_seconds", dict(labels), extra, t))
            batch.samples.append(Sample("verl_rank_peer_wait_share", labels, min(1.0, extra / step) if step > 0 else 0.0, t))

    def _forget_idle(self) -> None:
        if self._steps % IDLE_STEPS:
            return  # swept once per IDLE_STEPS steps: a history lives at most twice that unseen
        for key in [k for k, last in self._seen.items() if self._steps - last >= IDLE_STEPS]:
            del self._seen[key]
            self._past.pop(key, None)


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
