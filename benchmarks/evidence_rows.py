"""What refreshing a diagnosis' evidence costs while alerts fire on every node: whole rows against deltas.

    python benchmarks/evidence_rows.py [--nodes 125] [--gpus 8] [--hours 6] [--refreshes 12] [--json]

With a notify config, while an alert a diagnosis procedure explains fires (``MemoryLeakSuspected``,
``RewardDistributionDrift``, ...), the pipeline captures the evidence of the firing nodes every 5 s
(``DiagnosisNeeds.rediagnose_s``) and the alert book writes it into the transition log on the scrape loop's
thread; the engine reads it on its own. On the 1000-GPU load (``monitor_memory.py``'s: the same daemon,
config and rounds on a simulated clock) the store is filled to ``--hours`` of history (``monitor_memory.fill``,
then 3 real rounds), and every node is taken as firing. Then ``--refreshes`` times: one real 5-s round,
one capture, and the capture written both ways into two WAL databases as the book writes it: a whole
row every time (``alerting.translog.append_evidence``, what every refresh wrote before deltas) and
the book's writer (``TransitionLog.append_evidence``: a whole row, then rows of what is new), each read back
by a follower on its own connection (``evidence_after``, as the engine reads).

Reported per way: the median row size, the writer's milliseconds (encode + insert + commit, the scrape
loop's thread) and the follower's (read + decode or fold), all after the first row; ``same``: the follower's
windows equal the whole row's after every refresh. Last line: one JSON object; bad arguments: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import monitor_memory  # noqa: E402
import monitor_scale  # noqa: E402
import monitor_vs_prometheus  # noqa: E402


def _log(path: Path) -> Any:
    from alerting import translog
    from alerting.translog import TransitionLog

    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    translog.create(conn)
    log = TransitionLog(conn, path)
    return log, log.reader()


def run(nodes: int, gpus: int, hours: float, refreshes: int) -> dict[str, Any]:
    import numpy as np

    from alerting import translog
    from alerting.clock import SimulatedClock
    from monitor.config import load_config
    from monitor.daemon import Daemon

    cluster = monitor_scale.Cluster(nodes, gpus)
    work = Path(tempfile.mkdtemp(prefix="evidence-rows-"))
    config = load_config(str(monitor_vs_prometheus.monitor_config(9, nodes, work, "500ms")))
    clock = SimulatedClock(monitor_memory.T0)
    daemon = Daemon(config, clock)
    pipeline = daemon.pipeline
    targets = monitor_memory.load_targets(config, daemon)
    rounds = 0

    def one_round() -> None:
        nonlocal rounds
        now = monitor_memory.T0 + rounds * monitor_memory.PERIOD_S
        clock.set(now)
        monitor_memory.scrape_round(daemon, cluster, targets, now)
        rounds += 1

    for _ in range(3):
        one_round()
    fill = max(0, math.ceil(hours * 3600 / monitor_memory.PERIOD_S) - rounds)
    monitor_memory.fill(pipeline.store, cluster, rounds - 1, fill)
    rounds += fill
    for _ in range(3):
        one_round()
    whole_log, whole_reader = _log(work / "whole.db")
    delta_log, delta_reader = _log(work / "delta.db")
    figures: dict[str, dict[str, list[float]]] = {w: {"bytes": [], "write_ms": [], "read_ms": []}
                                                  for w in ("whole", "delta")}
    places, same, windows = {"whole": 0, "delta": 0}, True, 0
    for _ in range(refreshes + 1):
        one_round()
        got = {}
        for way, log, reader in (("whole", whole_log, whole_reader), ("delta", delta_log, delta_reader)):
            ev = pipeline.evidence.capture(clock.now(), None, {})  # one each: a capture decodes as it is read
            windows = len(ev.series)
            t0 = time.perf_counter()
            log.conn.execute("BEGIN IMMEDIATE")
            if way == "whole":
                translog.append_evidence(log.conn, ev, clock.now())
            else:
                log.append_evidence(log.conn, ev, clock.now())
            log.conn.execute("COMMIT")
            t1 = time.perf_counter()
            place, got[way] = reader.evidence_after(places[way])
            t2 = time.perf_counter()
            places[way] = place
            size = log.conn.execute("SELECT LENGTH(record) FROM alert_evidence WHERE id=?", (place,)).fetchone()[0]
            for key, value in (("bytes", size), ("write_ms", (t1 - t0) * 1e3), ("read_ms", (t2 - t1) * 1e3)):
                figures[way][key].append(value)
        a, b = got["whole"], got["delta"]
        same = same and a is not None and b is not None and all(
            x.name == y.name and x.labels == y.labels and np.array_equal(x.t, y.t) and np.array_equal(x.v, y.v)
            for x, y in zip(a.series, b.series, strict=True))
    pipeline.close()
    out: dict[str, Any] = {"benchmark": "evidence_rows", "gpus": nodes * gpus, "nodes": nodes, "hours": hours,
                           "windows": windows, "samples": int(sum(np.size(w.t) for w in ev.series)),
                           "refreshes": refreshes, "same": same, "cpu_count": os.cpu_count(),
                           "loadavg_1m": round(os.getloadavg()[0], 2)}
    for way, f in figures.items():
        out[way] = {"first_row_bytes": int(f["bytes"][0])} | {
            k: round(statistics.median(v[1:]), 2) for k, v in f.items()}
    out["write_ratio"] = round(out["whole"]["write_ms"] / max(out["delta"]["write_ms"], 1e-9), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=125, help="nodes of the load (2 targets each)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--hours", type=float, default=6.0, help="history in the store before the refreshes")
    p.add_argument("--refreshes", type=int, default=12, help="5-s refreshes measured after the first row")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    for name in ("nodes", "gpus", "refreshes"):
        if getattr(args, name) < 1:
            print(f"error: --{name} must be >= 1", file=sys.stderr)
            return 2
    if not (math.isfinite(args.hours) and args.hours >= 0):
        print("error: --hours must be a number >= 0", file=sys.stderr)
        return 2
    out = run(args.nodes, args.gpus, args.hours, args.refreshes)
    if not args.json:
        for way in ("whole", "delta"):
            f = out[way]
            print(f"{way}: {f['bytes'] / 1e6:.3f} MB a row, write {f['write_ms']} ms, read {f['read_ms']} ms")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
