"""The store's append path at the 1000-GPU load: ``Series.append`` for every series, round after round, past
several chunk seals, without parsing or evaluation.

    python benchmarks/store_append.py [--nodes 125] [--gpus 8] [--rounds 256] [--repeat 1] [--root DIR] [--json]

A 2-min run of the daemon never seals a chunk (the first seal is at 64 samples, 5.3 min at 5 s), so this
measures what the daemon spends on appending and sealing in steady state. The samples are the real load's:
``--record`` rounds (default 64, one chunk) of ``monitor_scale.Cluster`` through the daemon's own path
(parse, relabel, ingest, evaluation tick, as ``monitor_memory.py`` drives it) are recorded once per series
(time, value, and the capacity its readers reserved) and cached in the temp folder. The timed part replays
them into fresh ``monitor.series.store.Series`` of the same capacities: each round appends one sample to every
series (times on the 5-s grid with each series' own offset; values cycle forwards then backwards through
the recorded ones, as ``monitor_memory.fill`` does, so chunks compress as the real rounds' do). Reported:
CPU per round (``time.process_time``) over all rounds, over the rounds that seal chunks and over the rest,
and ``chunks.encode``'s CPU per sealed chunk on the recorded chunks alone. ``--root``: import ``monitor``
from another checkout (``--root /work/main``: the same samples against main's code, for an A/B).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def record(nodes: int, gpus: int, rounds: int) -> dict[str, Any]:
    """Per series: its capacity after ``rounds`` real rounds, and the (time, value) it got in each (NaN
    time: not fed that round)."""
    if str(ROOT / "benchmarks") not in sys.path:  # imported as benchmarks.store_append (its test)
        sys.path.append(str(ROOT / "benchmarks"))
    import monitor_memory
    import monitor_scale
    import monitor_vs_prometheus
    import numpy as np

    from alerting.clock import SimulatedClock
    from monitor.config import load_config
    from monitor.daemon import Daemon

    cluster = monitor_scale.Cluster(nodes, gpus)
    work = Path(tempfile.mkdtemp(prefix="store-append-"))
    config = load_config(str(monitor_vs_prometheus.monitor_config(9, nodes, work, "500ms")))
    clock = SimulatedClock(monitor_memory.T0)
    daemon = Daemon(config, clock)
    targets = monitor_memory.load_targets(config, daemon)
    rows: dict[int, tuple[Any, list[float], list[float]]] = {}
    for r in range(rounds):
        now = monitor_memory.T0 + r * monitor_memory.PERIOD_S
        clock.set(now)
        monitor_memory.scrape_round(daemon, cluster, targets, now)
        daemon.pipeline.tick()
        for s in daemon.pipeline.store:
            row = rows.setdefault(s.id, (s, [float("nan")] * rounds, [0.0] * rounds))
            if s.last_t >= now - monitor_memory.PERIOD_S / 2:
                row[1][r], row[2][r] = s.last_t, s.last_v
    daemon.pipeline.close()
    series = [row for row in rows.values() if not row[0].gone]
    return {"capacity": np.array([s.capacity for s, _, _ in series]),
            "t": np.array([ts for _, ts, _ in series]), "v": np.array([vs for _, _, vs in series])}


def load(nodes: int, gpus: int, rounds: int) -> dict[str, Any]:
    import numpy as np

    path = Path(tempfile.gettempdir()) / f"store_append_{nodes}x{gpus}_{rounds}.npz"
    if not path.exists():
        rec = record(nodes, gpus, rounds)
        np.savez(path, **rec)
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def replay(rec: dict[str, Any], rounds: int) -> dict[str, Any]:
    import numpy as np

    from monitor.series import chunks
    from monitor.series.store import CHUNK, Series

    caps, t_rec, v_rec = rec["capacity"], rec["t"], rec["v"]
    fed = ~np.isnan(t_rec).any(axis=1)  # series fed every recorded round (the load's; a few come and go)
    caps, t_rec, v_rec = caps[fed], t_rec[fed], v_rec[fed]
    n_rec = t_rec.shape[1]
    period = float(np.median(np.diff(t_rec[0])))
    base = t_rec[:, 0]
    series = [Series("s", {"i": str(i)}, int(c), i) for i, c in enumerate(caps.tolist())]
    cycle = np.concatenate([v_rec, v_rec[:, ::-1]], axis=1)
    per_round: list[float] = []
    for r in range(rounds):
        ts = (base + r * period).tolist()
        vs = cycle[:, r % (2 * n_rec)].tolist()
        c0 = time.process_time()
        for s, t, v in zip(series, ts, vs, strict=True):
            s.append(t, v)
        per_round.append(time.process_time() - c0)
    chunked = int((caps > CHUNK).sum())
    seal_rounds = [r for r in range(rounds) if (r + 1) % CHUNK == 0]
    rest = [x for r, x in enumerate(per_round) if (r + 1) % CHUNK]
    # encode alone: the recorded first chunk of every chunked series
    heads = [(np.ascontiguousarray(t_rec[i, :CHUNK]), np.ascontiguousarray(v_rec[i, :CHUNK]))
             for i in np.flatnonzero(caps > CHUNK)]
    c0 = time.process_time()
    for t, v in heads:
        chunks.encode(t, v)
    enc_us = (time.process_time() - c0) / max(1, len(heads)) * 1e6
    return {"series": len(series), "chunked_series": chunked, "rounds": rounds,
            "cpu_per_round_ms": round(sum(per_round) / rounds * 1e3, 2),
            "seal_round_ms": round(sum(per_round[r] for r in seal_rounds) / max(1, len(seal_rounds)) * 1e3, 1),
            "plain_round_ms": round(sum(rest) / max(1, len(rest)) * 1e3, 2),
            "encode_us_per_chunk": round(enc_us, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=125)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--record", type=int, default=64, help="real rounds recorded (cached in the temp folder)")
    ap.add_argument("--rounds", type=int, default=256, help="rounds appended (a seal every 64)")
    ap.add_argument("--repeat", type=int, default=1, help="replays, each on fresh series; all reported")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose monitor package is measured")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args()
    sys.path[:0] = [args.root, str(ROOT / "benchmarks")]
    out = sys.stdout
    if args.json:  # the daemon's console lines during the recording go nowhere
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the whole run
    rec = load(args.nodes, args.gpus, args.record)
    import monitor

    runs = [replay(rec, args.rounds) for _ in range(args.repeat)]
    result = {"benchmark": "store_append", "root": str(Path(monitor.__file__).resolve().parents[1]),
              "gpus": args.nodes * args.gpus, "runs": runs, "loadavg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(result), file=out, flush=True)
    else:
        for x in runs:
            print(f"{x['series']} series ({x['chunked_series']} chunked), {x['rounds']} rounds: "
                  f"{x['cpu_per_round_ms']} ms/round (seal rounds {x['seal_round_ms']} ms, others "
                  f"{x['plain_round_ms']} ms), encode {x['encode_us_per_chunk']} us/chunk")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
