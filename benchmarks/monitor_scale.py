"""Monitor at cluster scale: a synthetic 125-node x 8-GPU cluster on loopback, scraped by the real daemon.

    python benchmarks/monitor_scale.py [--nodes 125] [--gpus 8] [--duration 120] [--warmup 20] [--json]

Three processes, so that only the monitor's own work is charged to it:

* load generator (``--serve``): one HTTP server with, per node, a dcgm-exporter-shaped exposition
  (the fields and label shape of ``tests/fixtures/dcgm-exporter-sample.prom``, one block per GPU)
  and a trainer-shaped one (every family of ``verl.metrics.catalog``); values move every 5 s;
* the monitor (``--run-monitor``): ``monitor.daemon.Daemon`` with all default rules, 2 targets per
  node at 5 s, evaluation every ``--eval-interval``; it times each scrape and evaluation tick;
* this driver: samples the monitor's CPU time and RSS with psutil, collects the figures.

Figures: ``cpu_fraction`` = monitor CPU seconds / wall seconds over the measured window (cores);
``eval_lag_p99_seconds`` = p99 over scrapes of (end of the first evaluation tick that saw the scrape's
samples - the moment the scrape started), i.e. sample -> evaluated, including fetch, parse, ingest, the
wait for the next tick and the tick itself; ``ingest_lag_p99_seconds`` the same up to "in the store and
the streaming detectors"; ``gauge_eval_lag_p99_seconds`` the daemon's own ``verl_monitor_eval_lag_seconds``
(newest sample age at evaluation; with scrapes every 5 s it is a 0-5 s sawtooth by construction);
``rss_bytes`` the monitor's peak resident set. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DCGM_FIXTURE = ROOT / "tests" / "fixtures" / "dcgm-exporter-sample.prom"
PERIOD_S = 5.0
LINE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")


# ---- load generator ---------------------------------------------------------------------------------

class Series:
    """One exposed line whose value moves each period: a bounded random walk, or a counter."""

    __slots__ = ("prefix", "value", "lo", "hi", "step", "counter")

    def __init__(self, prefix: str, value: float, lo: float, hi: float, counter: bool = False) -> None:
        self.prefix, self.value, self.lo, self.hi, self.counter = prefix, value, lo, hi, counter
        self.step = (hi - lo) * 0.02 if not counter else (16.0 if 'outcome="ok"' in prefix else 0.0)

    def move(self, rng: random.Random) -> str:
        if self.counter:
            self.value += self.step  # healthy counters (calls, tokens) grow; error counters have step 0
        else:
            self.value = min(self.hi, max(self.lo, self.value + rng.uniform(-self.step, self.step)))
        return f"{self.prefix} {self.value:.6g}"


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}" if d else ""


def dcgm_series(node: int, gpus: int) -> tuple[list[str], list[Series]]:
    text = DCGM_FIXTURE.read_text().splitlines()  # in the repository: always there
    lines = [ln for ln in text if ln and not ln.startswith("#")]
    header = [ln for ln in text if ln.startswith(("# HELP", "# TYPE"))]
    out = []
    for g in range(gpus):
        labels = _labels({"gpu": str(g), "UUID": f"GPU-{node:04d}{g:04d}-0000-0000-0000-000000000000",
                          "pci_bus_id": f"00000000:{0x10 + g:02X}:00.0", "device": f"nvidia{g}",
                          "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": f"gpu-{node:03d}",
                          "DCGM_FI_DRIVER_VERSION": "535.104.05"})
        for ln in lines:
            m = LINE_RE.match(ln)
            if not m:
                continue
            name, v = m.group(1), float(m.group(2))
            if name == "DCGM_FI_DEV_FB_USED":
                out.append(Series(name + labels, 60000.0, 55000.0, 65000.0))
            elif name.endswith(("_TEMP", "_UTIL", "_USAGE", "_ACTIVE")):
                out.append(Series(name + labels, max(v, 40.0), 30.0, 75.0))
            elif name.startswith(("DCGM_FI_DEV_XID", "DCGM_FI_DEV_NVLINK", "DCGM_FI_DEV_ECC")):
                out.append(Series(name + labels, 0.0, 0.0, 0.0))
            elif "TOTAL" in name or "COUNTER" in name:
                out.append(Series(name + labels, v, v, v, counter=True))
            else:
                out.append(Series(name + labels, v, v * 0.9, v * 1.1 + 1))
    return header, out


TRAINER_LABEL_VALUES: dict[str, list[str]] = {
    "stage": ["rollout", "reward", "reference", "critic", "actor_update", "checkpoint", "dataloader"],
    "component": ["actor", "critic", "reward"], "outcome": ["ok", "timeout", "error", "oom", "cached"],
    "reason": ["too_long", "illegal_chars", "schema", "empty"], "model": ["actor", "critic"],
    "worker": ["0", "1", "2", "3"], "layer": [str(i) for i in range(32)], "link": [str(i) for i in range(6)],
    "type": ["crc_flit", "replay"], "method": ["lexical"],
}
TRAINER_RANGES = {"verl_gpu_memory_used_bytes": (60e9, 55e9, 65e9), "verl_gpu_memory_total_bytes": (80e9, 80e9, 80e9),
                  "verl_gpu_temperature_celsius": (60, 40, 75), "verl_host_cpu_utilization_ratio": (0.5, 0.2, 0.8),
                  "verl_actor_tokens_per_second": (12000, 11000, 13000), "verl_kl_divergence": (0.02, 0.015, 0.025),
                  "verl_reward_std": (0.3, 0.25, 0.35), "verl_rollout_buffer_size": (4000, 3800, 4200),
                  "verl_heartbeat_timestamp_seconds": (0, 0, 0), "verl_reward_shift_ks_pvalue": (0.5, 0.3, 0.7),
                  "verl_checkpoint_last_success_timestamp_seconds": (0, 0, 0), "verl_reward_model_circuit_state": (0, 0, 0),
                  "verl_rollout_buffer_age_seconds": (60, 30, 90)}


def trainer_series(node: int, gpus: int) -> tuple[list[str], list[Series]]:
    from verl.metrics.catalog import CATALOG, CONFIG_INFO_LABELS

    out: list[Series] = []
    header = []
    for spec in CATALOG:
        if spec.kind == "histogram" or spec.name == "verl_gpu_xid_errors_total":
            continue  # no Xid has happened: dcgm and the trainer expose no series until one does
        header.append(f"# TYPE {spec.name} {'gauge' if spec.kind == 'info' else spec.kind}")
        combos: list[dict[str, str]] = [{}]
        for lab in spec.labels:
            values = [str(g) for g in range(gpus)] if lab == "gpu" else TRAINER_LABEL_VALUES.get(lab, ["x"])
            if lab == "stage" and spec.name == "verl_rollout_buffer_size":
                values = ["train"]
            if spec.kind == "info" or lab in CONFIG_INFO_LABELS:
                values = values[:1]
            combos = [dict(c, **{lab: v}) for c in combos for v in values]
        for c in combos:
            if spec.kind == "info":
                info = {k: "1" for k in CONFIG_INFO_LABELS}
                info["node"] = f"gpu-{node:03d}"
                out.append(Series(spec.name + _labels(info), 1, 1, 1))
                continue
            v, lo, hi = TRAINER_RANGES.get(spec.name, (1.0, 0.5, 1.5))
            out.append(Series(spec.name + _labels(c), v, lo, hi, counter=spec.kind == "counter"))
    return header, out


class Cluster:
    """Rebuilds every node's exposition each period (double-buffered), serves them by path."""

    def __init__(self, nodes: int, gpus: int, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.parts: dict[str, tuple[list[str], list[Series]]] = {}
        for n in range(nodes):
            self.parts[f"/gpu-{n:03d}/dcgm"] = dcgm_series(n, gpus)
            self.parts[f"/gpu-{n:03d}/trainer"] = trainer_series(n, gpus)
        self.bodies: dict[str, bytes] = {}
        self.rebuild()

    def rebuild(self, now: float | None = None) -> None:  # now: simulated time (monitor_memory.py)
        now = time.time() if now is None else now
        bodies = {}
        for path, (header, series) in self.parts.items():
            lines = [s.move(self.rng) for s in series]
            if path.endswith("trainer"):
                lines = [f"verl_heartbeat_timestamp_seconds {now:.3f}" if ln.startswith("verl_heartbeat")
                         else f"verl_checkpoint_last_success_timestamp_seconds {now - 600:.3f}"
                         if ln.startswith("verl_checkpoint_last_success") else ln for ln in lines]
            bodies[path] = ("\n".join(header + lines) + "\n").encode()
        self.bodies = bodies

    def serve(self) -> ThreadingHTTPServer:
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = cluster.bodies.get(self.path.removesuffix("/metrics"))
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the monitor gave up on a slow answer (its timeout): counted there, not here

        server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


# The injected fault, a trainer counter step: one node's reward model runs out of memory once
# (RewardModelOOM: counter_increase, no `for`). A per-job series, so the Prometheus-source mode reads it too.
FAULT_LINE = 'verl_oom_events_total{component="reward"}'


def inject_fault(cluster: Cluster, node: int = 0) -> None:
    (series,) = [s for s in cluster.parts[f"/gpu-{node:03d}/trainer"][1] if s.prefix == FAULT_LINE]
    series.value += 1


def serve_main(nodes: int, gpus: int, faults: list[float] | None = None, fault_file: str | None = None) -> int:
    """``faults``: ``time.monotonic()`` instants (system-wide clock); the i-th shows on node ``gpu-<i>`` at
    the first rebuild from then on, and the moments those bodies are served are written to ``fault_file``
    (node -> time)."""
    cluster = Cluster(nodes, gpus)
    server = cluster.serve()
    lines = sum(b.count(b"\n") for b in cluster.bodies.values())
    print(json.dumps({"port": server.server_address[1], "targets": len(cluster.bodies), "lines": lines}), flush=True)
    pending = dict(enumerate(faults or []))
    shown: dict[str, float] = {}
    while True:
        time.sleep(PERIOD_S)
        due = [n for n, at in pending.items() if time.monotonic() >= at and n < nodes]
        for n in due:
            inject_fault(cluster, n)
            del pending[n]
        cluster.rebuild()
        if due and fault_file:
            shown.update({f"gpu-{n:03d}": time.monotonic() for n in due})
            Path(fault_file).write_text(json.dumps(shown))


# ---- the monitor, instrumented ------------------------------------------------------------------------

class Rows:
    """The instrumentation's events as flat float64 (8 B a number): in lists of tuples they took ~50 B a number
    inside the measured process (~30 MiB after 25 min at 250 targets, growing with the run), counted as the
    monitor's own resident set by the side-by-side run."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.data = array("d")

    def append(self, row: tuple[float, ...]) -> None:
        self.data.extend(row)

    def extend(self, rows: Any) -> None:
        for row in rows:
            self.data.extend(row)

    def __len__(self) -> int:
        return len(self.data) // self.width

    def rows(self) -> list[list[float]]:
        w, d = self.width, self.data.tolist()
        return [d[i: i + w] for i in range(0, len(d), w)]


def monitor_main(config: str, seconds: float, stats_path: str, profile: bool = False) -> int:
    import asyncio

    import monitor.daemon as daemon_mod
    import monitor.sources.scrape as scrape_mod
    from monitor.config import load_config
    from monitor.serve import run_event_loop

    cfg = load_config(config)
    d = daemon_mod.Daemon(cfg)
    started: dict[int, tuple[float, float]] = {}  # id(batch) -> (scrape start, scrape returned)
    # (scrape start, ingest done, scrape returned, ingest started) awaiting an evaluation
    pending: list[tuple[float, float, float, float]] = []
    # (time.monotonic() at the event, value): CLOCK_MONOTONIC is system-wide, the driver filters by its window
    ingest_lags = Rows(2)
    eval_lags = Rows(2)
    ticks = Rows(2)
    gauge = Rows(2)
    # where each eval lag went: (tick end, scrape = fetch + parse, ingest, wait for the tick, tick)
    lag_parts = Rows(5)
    loop_lags = Rows(2)  # how late a 100 ms timer fires: the event loop's backlog
    first_fired: dict[str, float] = {}  # "alertname node" -> time.monotonic() of its first firing transition
    lock = threading.Lock()
    real_scrape, real_ingest, real_tick = scrape_mod.scrape, d.ingest, d.pipeline.tick

    async def timed_scrape(client: Any, target: Any, now: float) -> Any:
        t0 = time.monotonic()
        batch, duration, up = await real_scrape(client, target, now)
        started[id(batch)] = (t0, time.monotonic())
        return batch, duration, up

    def timed_ingest(batch: Any, target: str | None = None, seen: float | None = None) -> None:
        begun = time.monotonic()
        real_ingest(batch, target, seen)
        times = started.pop(id(batch), None)
        if times is not None:
            t0, scraped = times
            done = time.monotonic()
            with lock:
                ingest_lags.append((done, done - t0))
                pending.append((t0, done, scraped, begun))

    def timed_tick() -> Any:
        t0 = time.monotonic()
        with lock:
            seen = [p for p in pending if p[1] <= t0]
            pending[:] = [p for p in pending if p[1] > t0]
        out = real_tick()
        t1 = time.monotonic()
        for alert in out or ():
            if alert.status == "firing":
                first_fired.setdefault(f"{alert.name} {alert.labels.get('node', '')}", t1)
        ticks.append((t1, t1 - t0))
        eval_lags.extend((t1, t1 - s) for s, *_ in seen)
        lag_parts.extend((t1, scraped - s, done - begun, t0 - done, t1 - t0) for s, done, scraped, begun in seen)
        gauge.append((t1, d.metrics.eval_lag._value.get()))
        return out

    scrape_mod.scrape = timed_scrape  # what the scrape source calls
    d.ingest = timed_ingest  # type: ignore[method-assign]
    d.pipeline.tick = timed_tick  # type: ignore[method-assign]

    async def probe() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.1)
            loop_lags.append((time.monotonic(), time.monotonic() - t - 0.1))

    async def run() -> None:
        task = asyncio.create_task(d.run())
        asyncio.create_task(probe())  # noqa: RUF006 - ends with the loop
        await asyncio.sleep(seconds)
        d.stop()
        await task

    t_start = time.monotonic()
    hot: list[str] = []
    if profile:  # cProfile, not py-spy: py-spy is not installed and needs ptrace rights
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.runcall(run_event_loop, run())
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        hot = buf.getvalue().splitlines()
    else:
        run_event_loop(run())  # the loop the daemon runs on (uvloop where installed)
    Path(stats_path).write_text(json.dumps({
        "t_start": t_start, "ingest_lags": ingest_lags.rows(), "eval_lags": eval_lags.rows(), "ticks": ticks.rows(),
        "gauge": gauge.rows(), "profile": hot, "first_fired": first_fired, "lag_parts": lag_parts.rows(),
        "loop_lags": loop_lags.rows(), "series": len(d.pipeline.store), "firing": sorted({a.name for a in d.pipeline.book.firing()}),
        "errors": {f"{s.labels.get('target', '')}:{s.labels.get('reason', '')}": s.value
                   for m in d.metrics.scrape_errors.collect() for s in m.samples if s.name.endswith("_total")},
    }))
    return 0


# ---- driver -------------------------------------------------------------------------------------------

def _by_reason(errors: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, n in errors.items():
        reason = key.rsplit(":", 1)[-1]
        out[reason] = out.get(reason, 0) + n
    return out


def p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)], 4)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=125)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--duration", type=float, default=120.0, help="measured seconds (after --warmup)")
    p.add_argument("--warmup", type=float, default=20.0, help="seconds excluded at the start (imports, series creation)")
    p.add_argument("--eval-interval", default="500ms", help="monitor eval_interval (production default 500ms)")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    p.add_argument("--profile", action="store_true", help="run the monitor under cProfile and print its hot spots")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-monitor", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    p.add_argument("--stats", help=argparse.SUPPRESS)
    p.add_argument("--fault-at", type=float, nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--fault-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve_main(args.nodes, args.gpus, args.fault_at, args.fault_file)
    if args.run_monitor:
        return monitor_main(args.run_monitor, args.seconds, args.stats, args.profile)
    if args.nodes < 1 or args.gpus < 1 or args.duration <= 0:
        print("error: --nodes, --gpus and --duration must be positive", file=sys.stderr)
        return 2
    import psutil
    import yaml

    work = Path(tempfile.mkdtemp(prefix="verl-monitor-scale-"))
    gen = subprocess.Popen([sys.executable, __file__, "--serve", "--nodes", str(args.nodes), "--gpus", str(args.gpus)],
                           stdout=subprocess.PIPE, text=True)
    mon = None
    try:
        assert gen.stdout is not None
        info = json.loads(gen.stdout.readline())
        base = f"http://127.0.0.1:{info['port']}"
        targets = [{"name": f"gpu-{n:03d}-{kind}", "url": f"{base}/gpu-{n:03d}/{kind}/metrics", "node": f"gpu-{n:03d}",
                    "job": "dcgm" if kind == "dcgm" else "verl", "interval": "5s", "timeout": "3s"}
                   for n in range(args.nodes) for kind in ("dcgm", "trainer")]
        cfg = {"cluster": "bench", "listen": "127.0.0.1:0", "state_db": str(work / "state.db"),
               "eval_interval": args.eval_interval, "reward_outliers": False, "targets": targets,
               "limits": {"max_series": 200000, "max_series_per_metric": 50000}}
        (work / "monitor.yaml").write_text(yaml.safe_dump(cfg))
        total = args.warmup + args.duration
        mon = subprocess.Popen([sys.executable, __file__, "--run-monitor", str(work / "monitor.yaml"),
                                "--seconds", str(total), "--stats", str(work / "stats.json"),
                                *(["--profile"] if args.profile else [])])
        proc, genp = psutil.Process(mon.pid), psutil.Process(gen.pid)
        time.sleep(args.warmup)
        c0, w0 = sum(proc.cpu_times()[:2]), time.monotonic()
        g0 = sum(genp.cpu_times()[:2])
        rss, c1, w1 = 0, c0, w0
        while mon.poll() is None and time.monotonic() - w0 < args.duration - 0.5:
            rss = max(rss, proc.memory_info().rss)
            c1, w1 = sum(proc.cpu_times()[:2]), time.monotonic()
            time.sleep(1.0)
        cpu_fraction = (c1 - c0) / (w1 - w0)
        gen_fraction = (sum(genp.cpu_times()[:2]) - g0) / (time.monotonic() - w0)
        load = os.getloadavg()[0]
        mon.wait(timeout=60)
        stats = json.loads((work / "stats.json").read_text())
    finally:
        for child in (mon, gen):
            if child is not None and child.poll() is None:
                child.terminate()
                child.wait(10)
    def measured(xs: list[list[float]]) -> list[float]:
        return [v for t, v in xs if w0 <= t <= w1]

    scrapes = len(measured(stats["ingest_lags"]))
    # CPU the full load would need: the measured CPU per ingested scrape times the scrapes due per second.
    # On a shared machine the monitor can be starved (it then times out scrapes and uses less CPU than
    # the load needs); this figure does not hide that.
    demand = (c1 - c0) / scrapes * info["targets"] / 5.0 if scrapes else None

    result = {
        "benchmark": "monitor_scale", "nodes": args.nodes, "gpus": args.gpus * args.nodes,
        "targets": info["targets"], "exposed_lines": info["lines"], "series": stats["series"],
        "scrape_interval_s": 5.0, "eval_interval": args.eval_interval, "measured_seconds": args.duration,
        "cpu_fraction": round(cpu_fraction, 3),
        "cpu_fraction_full_load": round(demand, 3) if demand is not None else None,
        "scrapes_ingested": scrapes, "scrapes_due": int(info["targets"] * (w1 - w0) / 5.0),
        "eval_lag_p99_seconds": p99(measured(stats["eval_lags"])),
        "ingest_lag_p99_seconds": p99(measured(stats["ingest_lags"])),
        "tick_p99_seconds": p99(measured(stats["ticks"])),
        "gauge_eval_lag_p99_seconds": p99(measured(stats["gauge"])), "rss_bytes": rss,
        "alerts_firing": stats["firing"], "scrape_errors": _by_reason(stats["errors"]),
        "loadgen_cpu_fraction": round(gen_fraction, 3),
        "cpu_count": os.cpu_count(), "loadavg_1m_at_end": round(load, 2),
        "targets_met": {"cpu_fraction<=0.5": cpu_fraction <= 0.5,
                        "eval_lag_p99<=1.0": (p99(measured(stats["eval_lags"])) or 1e9) <= 1.0},
    }
    if not args.json:
        for k, v in result.items():
            print(f"{k:28s} {v}")
        if stats["profile"]:
            print("\n".join(stats["profile"]))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
