"""The monitor's memory over hours: resident set after N hours of 5-s scrapes at 1000 GPUs, on simulated time.

    python benchmarks/monitor_memory.py [--nodes 125] [--gpus 8] [--hours 0.5,1,2] [--fast-forward H] [--json]

One process: the load of ``monitor_vs_prometheus.py`` (``monitor_scale.Cluster``: 2 targets per node,
64 625 lines at 125 nodes) rebuilt every simulated 5 s, and a ``monitor.daemon.Daemon`` built from the
same config (default rules) on a ``SimulatedClock``. Each round every target's body goes the scrape's
own path after the fetch: ``prom_text.parse_exposition`` with the target's scrape cache, the out-of-bounds
check, its ``up`` sample, ``relabel`` and ``Intake.ingest``; then one evaluation tick and the daemon's
collector freeze. No HTTP (the transport holds nothing per series) and no waiting: an hour of scrapes is
720 rounds as fast as the CPU parses them. At each of ``--hours``: the process' RSS (``/proc/self/statm``)
and peak RSS, series, samples the rings hold and (where the store has it) the samples their capacities
allow, i.e. where the rings stop growing, and the CPU per 5-s round since the previous checkpoint: the whole
round (parse, ingest, evaluation) and the evaluation tick alone (``cpu_per_round_ms``, ``tick_cpu_ms``: flat
while history fills means the cost does not grow with it), the ticks that moved no alert apart
(``tick_cpu_ms_no_transition``: each transition is rendered, committed and plotted, so the whole tick moves
with how often this load's alerts move) and, of those, the ones without the minutely O(series) housekeeping
(``tick_cpu_ms_evaluation_only``); ``steady``: the same over the last 12 minutes before the checkpoint (a
fast-forward leaves the detectors a gap of hours to take in first, and the windows a warm-up to refill). ``--hours 0.42,1,2,4,6``: the 25-min figure of the
wall-clock side-by-side run and the steady state of full histories (~5.7 h at 5 s) without waiting hours;
~0.3 CPU s a round, so 6 h is ~25 CPU min. ``--fast-forward 0.5``: a checkpoint more than 1 h after the
previous one is reached by filling the store in bulk (``fill``: every series' samples on the same 5-s grid,
through ``Series.append``, only the last ``capacity`` of them) up to 0.5 h before it, then 0.5 h of real
rounds, in which the detectors' windows (30 min at most at this load) fill again and the tick's CPU is
measured (``rounds_filled`` says how many rounds were filled): ``--hours 0.25,0.42,1,6 --fast-forward 0.5``
takes ~1080 real rounds instead of 4320. With ``--json`` one JSON line per checkpoint, each with all the
points so far (a run stopped early keeps its figures); the last line is the whole run.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import monitor_scale  # noqa: E402
import monitor_vs_prometheus  # noqa: E402

PERIOD_S = monitor_scale.PERIOD_S
T0 = 1_767_225_600.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ring_samples(store: Any) -> tuple[int, int | None]:
    """(samples held, samples the capacities allow; None on a store without per-series capacities)."""
    series = list(store)
    held = sum(len(s) for s in series)
    caps = [getattr(s, "capacity", None) for s in series]
    return held, None if any(c is None for c in caps) else sum(caps)


def fill(store: Any, cluster: Any, last_round: int, rounds: int) -> int:
    """Fast-forward: the store's rings as ``rounds`` more 5-s rounds after ``last_round`` would leave them,
    without parsing, relabelling or evaluating them. Each series fed at ``last_round`` gets its samples
    on the same 5-s grid (its own offset from the round's time kept), through ``Series.append`` as
    ingestion would append them, and only the last ``capacity`` of them (the ring keeps no more).
    Values: a counter (a non-decreasing held history that rose) carries on at its last step, as the load's
    counters do (``monitor_scale.Series``: a fixed step); a gauge replays its own held history forwards
    then backwards (the load's gauges are bounded random walks: the same values, steps and decimals, so
    the chunks compress as the real rounds' would). The load's own counters are advanced by the same
    rounds, so the next real round continues them. Returns the samples appended."""
    import numpy as np

    end_t = T0 + (last_round + rounds) * PERIOD_S
    last_t = T0 + last_round * PERIOD_S
    appended = 0
    for s in store:
        if not s.last_t >= last_t - PERIOD_S / 2:  # not fed in the last round: not fed on
            continue
        t0, v = s.window()
        n = min(rounds, s.capacity)
        if v.size >= 2 and np.all(np.diff(v) >= 0) and v[-1] > v[0]:
            step = float(v[-1] - v[-2])
            vals = [float(v[-1]) + step * (k + 1) for k in range(rounds - n, rounds)]
        else:
            cycle = np.concatenate([v, v[::-1]]) if v.size > 1 else v
            vals = [float(cycle[(k + v.size) % cycle.size]) for k in range(rounds - n, rounds)]
        off = s.last_t - last_t
        for k, value in zip(range(rounds - n, rounds), vals, strict=True):
            s.append(last_t + (k + 1) * PERIOD_S + off, value)
        appended += n
        assert s.last_t < end_t + PERIOD_S / 2
    for _header, series in cluster.parts.values():
        for line in series:
            if line.counter:
                line.value += line.step * rounds
    return appended


def load_targets(config: Any, daemon: Any) -> list[tuple[Any, str, dict[str, str], Any]]:
    """The load's targets as ``scrape_round`` reads them (each with its scrape cache given to the daemon)."""
    from monitor.sources.relabel import KnownUnits

    targets = []
    for t in config.targets:
        path = t.url.removeprefix("http://127.0.0.1:9").removesuffix("/metrics")
        extra = {"job": t.job, "target": t.name, "instance": "127.0.0.1:9"}
        targets.append((t, path, extra, KnownUnits()))
        daemon.intake.caches[t.name] = t.cache
    return targets


def scrape_round(daemon: Any, cluster: Any, targets: list[tuple[Any, str, dict[str, str], Any]], now: float) -> None:
    """One 5-s round of the load through the scrape's own path after the fetch (module docstring)."""
    from monitor.model import Sample, with_node
    from monitor.sources.prom_text import parse_exposition, refuse_out_of_bounds
    from monitor.sources.relabel import relabel

    cluster.rebuild(now)
    for t, path, extra, units in targets:
        batch = parse_exposition(cluster.bodies[path].decode(), now, t.name, t.node, extra, t.honor_timestamps, t.cache)
        refuse_out_of_bounds(batch, now)
        batch.samples.append(Sample("up", with_node(dict(extra), t.node), 1.0, now))
        daemon.pipeline.verl_nodes |= relabel(batch, units)
        daemon.intake.ingest(batch, t.name, now)


STEADY_ROUNDS = 144  # the last 12 simulated minutes before a checkpoint: past the warm-up a fast-forward starts


def tick_figures(ticks: list[tuple[float, int, bool]]) -> dict[str, Any]:
    """The tick's CPU over ``ticks`` (CPU s, transitions, housekeeping ran): all of them; apart from their
    transitions (each one rendered, committed, plotted), the ticks that moved no alert; and of those, the
    ones without the store's eviction scan or malloc_trim (each minute, each O(series)): evaluation and the
    alert book alone."""
    quiet = [cpu for cpu, moved, _ in ticks if not moved]
    plain = [cpu for cpu, moved, housekept in ticks if not moved and not housekept]
    return {"tick_cpu_ms": round(sum(cpu for cpu, _, _ in ticks) * 1e3 / max(1, len(ticks)), 2),
            "tick_cpu_ms_no_transition": round(sum(quiet) * 1e3 / max(1, len(quiet)), 2),
            "ticks_no_transition": len(quiet),
            "tick_cpu_ms_evaluation_only": round(sum(plain) * 1e3 / max(1, len(plain)), 3),
            "ticks_evaluation_only": len(plain),
            "transitions_per_tick": round(sum(moved for _, moved, _ in ticks) / max(1, len(ticks)), 2)}


def run(nodes: int, gpus: int, hours: list[float], report: Any = print, refill_h: float | None = None) -> dict[str, Any]:
    """``refill_h``: fast-forward to ``refill_h`` before each checkpoint more than twice that beyond the
    previous one (``fill``), then run the last ``refill_h`` of rounds through the whole pipeline: the
    detectors' windows (30 min at most in the default rules at this load) fill from real rounds, the
    store's rings hold the whole span."""
    from alerting.clock import SimulatedClock
    from monitor.config import load_config
    from monitor.daemon import Daemon
    cluster = monitor_scale.Cluster(nodes, gpus)
    work = Path(tempfile.mkdtemp(prefix="monitor-memory-"))
    config = load_config(str(monitor_vs_prometheus.monitor_config(9, nodes, work, "500ms")))  # nothing is fetched
    clock = SimulatedClock(T0)
    daemon = Daemon(config, clock)
    rss_start = rss_bytes()
    targets = load_targets(config, daemon)
    points: list[dict[str, Any]] = []
    rounds, started = 0, time.process_time()
    last_rounds, last_cpu = 0, started
    ticks: list[tuple[float, int, bool]] = []  # since the last checkpoint: (CPU s, transitions, housekeeping)
    pipeline = daemon.pipeline
    for h in sorted(hours):
        target = math.ceil(h * 3600 / PERIOD_S)
        filled = 0
        if refill_h is not None and target - rounds > 2 * refill_h * 3600 / PERIOD_S:
            skip = target - rounds - math.ceil(refill_h * 3600 / PERIOD_S)
            fill(daemon.pipeline.store, cluster, rounds - 1, skip)
            rounds += skip
            filled = skip
            last_rounds, last_cpu, ticks = rounds, time.process_time(), []
        while rounds < target:
            now = T0 + rounds * PERIOD_S
            clock.set(now)
            scrape_round(daemon, cluster, targets, now)
            housekept = (pipeline._evicted_at, pipeline._trimmed_at)
            tick0 = time.process_time()
            moved = len(pipeline.tick())
            ticks.append((time.process_time() - tick0, moved, housekept != (pipeline._evicted_at, pipeline._trimmed_at)))
            daemon._freeze_if_grown()  # what the daemon's source loop does after each round
            rounds += 1
        gc.collect()
        held, allowed = ring_samples(daemon.pipeline.store)
        points.append({"hours": h, "rounds": rounds, "rss_bytes": rss_bytes(),
                       "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                       "series": len(daemon.pipeline.store), "ring_samples_held": held, "rounds_filled": filled,
                       "ring_samples_allowed": allowed, "cpu_seconds": round(time.process_time() - started, 1),
                       "cpu_per_round_ms": round((time.process_time() - last_cpu) * 1e3 / max(1, rounds - last_rounds), 1),
                       **tick_figures(ticks), "steady": tick_figures(ticks[-STEADY_ROUNDS:]),
                       "firing": sum(daemon.pipeline.book.firing_counts().values())})
        last_rounds, last_cpu, ticks = rounds, time.process_time(), []
        result = {"benchmark": "monitor_memory", "gpus": nodes * gpus, "nodes": nodes, "targets": len(targets),
                  "interval_s": PERIOD_S, "rss_before_series_bytes": rss_start, "points": points,
                  "cpu_count": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}
        report(result)
    daemon.pipeline.close()
    return result


def show(result: dict[str, Any]) -> None:
    p = result["points"][-1]
    print(f"{p['hours']:5.2f} h  rss {p['rss_bytes'] / 1e6:7.1f} MB  series {p['series']}  ring samples "
          f"{p['ring_samples_held']}" + (f" of {p['ring_samples_allowed']}" if p["ring_samples_allowed"] else "")
          + f"  cpu/round {p['cpu_per_round_ms']} ms  tick {p['tick_cpu_ms']} ms ({p['tick_cpu_ms_no_transition']} "
          f"without a transition, {p['tick_cpu_ms_evaluation_only']} of them evaluation only; {p['transitions_per_tick']} transitions a tick, {p['firing']} firing; last 12 min: tick "
          f"{p['steady']['tick_cpu_ms']} ms, {p['steady']['tick_cpu_ms_evaluation_only']} evaluation only)",
          flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=125)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", default="0.5,1,2", help="checkpoints, comma-separated (simulated hours)")
    ap.add_argument("--fast-forward", type=float, default=None, metavar="HOURS",
                    help="reach a checkpoint by filling the store in bulk up to HOURS before it, then "
                         "HOURS of real rounds (e.g. 0.5: the default rules' longest window at this load)")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args()
    try:
        hours = [float(h) for h in args.hours.split(",")]
    except ValueError:
        print(f"--hours: expected comma-separated numbers like 0.5,1,2, got {args.hours!r}", file=sys.stderr)
        return 2
    out = sys.stdout
    if args.json:  # the console's alert lines go nowhere; the JSON lines to the real stdout
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the whole run

    def report(result: dict[str, Any]) -> None:
        print(json.dumps(result), file=out, flush=True)
    run(args.nodes, args.gpus, hours, report if args.json else show, args.fast_forward)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
