"""The path of one sample, trainer ``/metrics`` -> WeCom, measured as it runs (the README tour's figures).

    python benchmarks/sample_path.py [--json] [--timeout 60]

In one process: verl's metrics server (``verl/metrics/server.py``) serves a registry holding only the
sample's counter, ``verl_reward_model_calls_total{outcome}`` (so no other series' path is counted); the
monitor daemon (``monitor/daemon.py``: its asyncio loop in a thread named ``scrape-loop``, its evaluation
on the thread ``evaluation``) scrapes it every second and notifies through the alerting engine to a WeCom
stand-in on loopback (the demo's configs, ``harness/profile.py``, correlation hold 1 s). Once the monitor
has seen the counter and the engine runs, three reward-model timeouts are counted and a profiler hook
(``threading.setprofile``) records every function of verl/, monitor/ and alerting/ that runs, on which
thread, until the stand-in has the message.

Reported: ``modules`` and ``functions`` (distinct named ones that ran in that window on any thread but
the benchmark's own: the sample's path plus what the same loops ran beside it, such as the ``up`` series'
rules, the same for every version measured; comprehensions and lambdas are not counted), ``threads``,
``by_thread`` (modules and functions on each; ``scrape_loop`` is the scrape loop's entry), ``commits``
(SQLite write transactions committed on the alert path, ``alerting.durable.committed``) per thread, and on
the scrape loop's thread by the module that committed, ``alerting_on_scrape_loop`` (alerting's functions
that ran on the scrape loop's thread: with evaluation on a thread of its own, only the clock the monitor's
timeline wraps), and ``evidence_row`` (what writing evidence into the log costs the thread that evaluates:
an 8-GPU node, the 11 whole-ring series at 4096 samples and 4 newest-only series per GPU; ``whole``: the
first row, bytes, and the median of 5 in milliseconds of encoding it and of the whole append with its
commit, encoding included; ``refresh``: the row 5 s later, which holds only the new samples). A run on
another checkout measures that version: ``PYTHONPATH=OTHER python /a/copy/outside/any/checkout/sample_path.py``.
Last line: one JSON object. Bad arguments: one line, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "monitor").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import monitor  # noqa: E402

HOUSE = Path(monitor.__file__).resolve().parents[1]  # the checkout measured (PYTHONPATH may name another)
PACKAGES = ("verl", "monitor", "alerting")
LOOP = "scrape-loop"


class Trace:
    """Every function of the measured packages that runs while ``on``, by thread."""

    def __init__(self) -> None:
        self.on = False
        self.ran: dict[tuple[str, str], set[str]] = {}
        self.commits: Counter[tuple[str, str]] = Counter()  # (thread, the module that committed)
        self._files: dict[str, str | None] = {}

    def _module(self, filename: str) -> str | None:
        if filename not in self._files:
            try:
                rel = Path(filename).resolve().relative_to(HOUSE).as_posix()
            except ValueError:
                rel = None
            self._files[filename] = rel if rel is not None and rel.split("/")[0] in PACKAGES else None
        return self._files[filename]

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call" or frame.f_code.co_name.startswith("<"):
            return
        module = self._module(frame.f_code.co_filename)
        if module is None:
            return
        thread = threading.current_thread().name
        if thread == "MainThread":  # the benchmark waiting for the page
            return
        self.ran.setdefault((module, frame.f_code.co_qualname), set()).add(thread)
        if module == "alerting/durable.py" and frame.f_code.co_name == "committed" and frame.f_back is not None:
            self.commits[thread, self._module(frame.f_back.f_code.co_filename) or "?"] += 1

    def on_thread(self, thread: str) -> dict[str, int]:
        return {"modules": len({m for (m, _), ts in self.ran.items() if thread in ts}),
                "functions": sum(thread in ts for ts in self.ran.values())}

    def report(self) -> dict[str, Any]:
        modules = sorted({m for m, _ in self.ran})
        threads = sorted({t for ts in self.ran.values() for t in ts})
        return {"modules": len(modules), "functions": len(self.ran), "threads": threads,
                "commits_by_thread": {t: sum(n for (th, _), n in self.commits.items() if th == t)
                                      for t in sorted({th for th, _ in self.commits})},
                "commits_on_scrape_loop": {m: n for (th, m), n in sorted(self.commits.items()) if th == LOOP},
                "alerting_on_scrape_loop": sorted(f"{m}:{f}" for (m, f), ts in self.ran.items()
                                                  if m.startswith("alerting/") and LOOP in ts),
                "by_package": {p: sum(m.startswith(p + "/") for m in modules) for p in PACKAGES},
                "scrape_loop": self.on_thread(LOOP),
                "by_thread": {t: self.on_thread(t) for t in threads},
                "module_list": modules}


def measure(timeout_s: float) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry, Counter

    from harness.profile import write_configs
    from harness.standin import WeComStandIn
    from monitor.config import load_config
    from monitor.daemon import Daemon
    from verl.metrics.server import MetricsServer

    trace = Trace()
    threading.setprofile(trace.hook)  # before any thread of ours starts: each one carries the hook
    sys.setprofile(trace.hook)
    registry = CollectorRegistry()
    calls = Counter("verl_reward_model_calls", "Reward model calls by outcome.", ["outcome"], registry=registry)
    calls.labels(outcome="timeout")
    server = MetricsServer(registry, "127.0.0.1", 0, health=lambda: {"status": "ok"}, outliers=lambda n: [])
    robot = WeComStandIn()
    work = Path(tempfile.mkdtemp(prefix="verl-sample-path-"))
    cfg = write_configs(work, robot, "wecom", server.url, "gpu-0", "bench", 1.0, False, None,
                        correlation_window="1s")
    os.chdir(work)  # the configs name their files relative to the workdir
    daemon = Daemon(load_config(cfg))
    ready = threading.Event()
    loop = threading.Thread(target=lambda: asyncio.run(daemon.run(ready)), name=LOOP, daemon=True)
    loop.start()
    try:
        if not ready.wait(30):
            raise SystemExit("error: the daemon did not start in 30 s")
        deadline = time.monotonic() + timeout_s
        name = "verl_reward_model_calls_total"
        while not any(s.name == name and len(s) >= 2 for s in list(daemon.pipeline.store)):
            if time.monotonic() > deadline:
                raise SystemExit("error: the monitor did not scrape the trainer twice")
            time.sleep(0.1)
        trace.on = True
        started = time.monotonic()
        calls.labels(outcome="timeout").inc(3)  # what verl/fault/circuit_breaker.py counts on a hang
        while not robot.received:
            if time.monotonic() > deadline:
                raise SystemExit("error: no WeCom message within --timeout")
            time.sleep(0.02)
        trace.on = False
        out = trace.report()
        out["seconds"] = round(time.monotonic() - started, 2)
        out["house"] = HOUSE.name
        return out
    finally:
        trace.on = False
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)
        daemon.stop()
        loop.join(10)
        server.close()
        robot.close()


def evidence_row(tmp: Path) -> dict[str, Any]:
    """The cost of one evidence row, written as the alert book writes it (WAL, synchronous=NORMAL): the
    first, whole, and a refresh 5 s later, which carries only the new samples (``alerting.evidence_log``)."""
    import sqlite3
    import statistics

    import numpy as np

    from alerting import translog
    from alerting.evidence import to_record
    from alerting.translog import TransitionLog
    from monitor.book.evidence import EvidenceCapture
    from monitor.series.store import SeriesStore, StoreLimits

    store = SeriesStore(StoreLimits(capacity=4096))
    rng = np.random.default_rng(0)
    ring = [store.get_or_create(f"s{i}", {"node": "n", "job": "verl"}) for i in range(11)]
    newest = [store.get_or_create(f"g{i % 4}", {"node": "n", "gpu": str(i // 4)}) for i in range(32)]
    for k in range(4096):
        for s in ring:
            s.append(5.0 * k, float(rng.random()))  # type: ignore[union-attr]
    for s in newest:
        s.append(5.0 * 4095, 1.0)  # type: ignore[union-attr]
    names = [f"s{i}" for i in range(11)] + [f"g{i}" for i in range(4)]
    capture = EvidenceCapture(store, None, names)
    conn = sqlite3.connect(str(tmp / "evidence.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    translog.create(conn)
    out: dict[str, Any] = {}
    for way in ("whole", "refresh"):
        encode, write, size = [], [], 0
        for k in range(5):
            log = TransitionLog(conn)
            ev = capture.capture(1.0, {"n"})
            if way == "refresh":  # the whole row, then 5 s of new samples, then the measured row
                log.append_evidence(conn, ev, 1.0)
                for s in ring + newest:
                    s.append(s.last_t + 5.0, float(rng.random()))  # type: ignore[union-attr]
                ev = capture.capture(2.0, {"n"})
            t0 = time.perf_counter()
            if way == "whole":
                to_record(capture.capture(1.0, {"n"}))
            t1 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            log.append_evidence(conn, ev, 2.0 + k)
            conn.execute("COMMIT")
            t2 = time.perf_counter()
            encode.append(t1 - t0)
            write.append(t2 - t1)
            size = conn.execute("SELECT LENGTH(record) FROM alert_evidence ORDER BY id DESC").fetchone()[0]
        out[way] = {"bytes": int(size), "append_commit_ms": round(statistics.median(write) * 1e3, 2)}
        if way == "whole":
            out[way]["encode_ms"] = round(statistics.median(encode) * 1e3, 1)
    conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    args = p.parse_args(argv)
    if args.timeout <= 0:
        print("error: --timeout must be > 0", file=sys.stderr)
        return 2
    out = measure(args.timeout)
    from alerting import translog

    if hasattr(translog.TransitionLog, "append_evidence"):  # a version that writes evidence rows as deltas
        out["evidence_row"] = evidence_row(Path(tempfile.mkdtemp(prefix="verl-sample-path-ev-")))
    if not args.json:
        print(f"{out['modules']} modules, {out['functions']} functions, threads {out['threads']}")
        print(f"commits by thread: {out['commits_by_thread']}")
        print("modules / functions by thread:", *(f"{t}: {n['modules']} / {n['functions']}"
                                                   for t, n in out["by_thread"].items()), sep="\n  ")
        print("alerting on the scrape loop:", *out["alerting_on_scrape_loop"], sep="\n  ")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
