"""The monitor beside a real Prometheus, measured side by side on the same load in one run.

    python benchmarks/monitor_vs_prometheus.py [--nodes 125] [--gpus 8] [--duration 120] [--warmup 30] [--json]
    python benchmarks/monitor_vs_prometheus.py --mode prometheus-source [--source-interval 15s] ...

Four processes: the load generator of ``monitor_scale.py --serve`` (per node a dcgm-exporter-shaped and a
trainer-shaped exposition, values moving every 5 s), Debian's ``prometheus`` (its own temp dir and free
port, every target scraped every 5 s, the project's recording and alerting rules of ``prometheus/rules``
evaluated every 5 s, no Alertmanager; ``verl-recording.yml`` and ``verl-alerts.yml``), the monitor of ``monitor_scale.py --run-monitor`` (default rules,
``eval_interval`` 500 ms, the same targets every 5 s) and this driver, which samples both with psutil over
the same window after ``--warmup`` (series creation, imports, Prometheus' first head chunk).

Figures: ``*_cpu_cores`` = CPU seconds (user + system) / wall seconds over the window; ``*_peak_rss_bytes``
the largest resident set sampled once a second; ``cpu_ratio`` and ``rss_ratio`` = monitor / Prometheus;
``eval_lag_p99_seconds`` the monitor's scrape start -> evaluated p99 (as in monitor_scale.py);
``prometheus_targets_up`` and ``prometheus_head_series`` show that Prometheus did the same work. Last line:
one JSON object.

``--victoria-metrics``: a third peer on the same load, Debian's VictoriaMetrics scraping the same targets every
5 s and its vmalert evaluating the same rules every 5 s (``_victoria.py``; the package is installed with
apt-get when missing); ``victoria_*`` figures are the two processes summed, ``*_ratio_victoria`` = monitor /
them. Every run also records each side's RSS once a minute from the start (``rss_by_minute_bytes``), its
final RSS and, from 15 minutes on, ``monitor_rss_growth_from_min15`` (final / minute 15 - 1): whether the
monitor's memory is flat once its histories fill. A 25-min run: ``--warmup 600 --duration 900`` (CPU over
minutes 10-25).

``--mode prometheus-source``: the deployment past one machine. Prometheus scrapes alone and also
evaluates ``prometheus/rules/verl-monitor-source.yml``; the monitor scrapes nothing and reads Prometheus
with ``monitor/examples/prometheus-source.yaml`` every ``--source-interval``. ``query_range_per_second``
is the load it puts on Prometheus (Prometheus' own ``prometheus_http_requests_total``);
``prometheus_cpu_cores`` then includes answering those queries.

``--fault-after S [--faults K --fault-every E]``: the load generator shows a fault ``S`` seconds into the
measured window and then every ``E`` s, ``K`` in all, each on the next node (``gpu-<i>``'s
``verl_oom_events_total{component="reward"}`` steps by 1 at its next 5 s rebuild); ``detection_delays_seconds``
= per fault, the monitor's first ``RewardModelOOM`` firing for that node - the moment the generator first
served it, in either mode (scraping the trainer directly, or reading it back from Prometheus); the
faults fall at different phases of the monitor's cycle, so their spread is the delay's distribution.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCALE = ROOT / "benchmarks" / "monitor_scale.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _victoria  # noqa: E402
from harness.ports import free_port  # noqa: E402

FAULT_ALERT = "RewardModelOOM"  # what the generator's fault (monitor_scale.inject_fault) must raise

SIDE_BY_SIDE_RULES = ("verl-recording.yml", "verl-alerts.yml")  # the rules Prometheus evaluates for users
SOURCE_RULES = ("verl-monitor-source.yml",)  # added in --mode prometheus-source: what the monitor reads


def prometheus_config(port: int, nodes: int, work: Path, rule_files: tuple[str, ...]) -> Path:
    """Every target with its own path and ``instance`` (they share the generator's address)."""
    import yaml

    rules = work / "rules"
    rules.mkdir()
    for name in rule_files:
        shutil.copy(ROOT / "prometheus" / "rules" / name, rules / name)
    jobs = []
    for kind, job in (("dcgm", "dcgm-exporter"), ("trainer", "verl-trainer")):
        jobs.append({"job_name": job, "scrape_interval": "5s", "scrape_timeout": "3s", "static_configs": [
            {"targets": [f"127.0.0.1:{port}"],
             "labels": {"__metrics_path__": f"/gpu-{n:03d}/{kind}/metrics", "instance": f"gpu-{n:03d}-{kind}",
                        "node": f"gpu-{n:03d}"}} for n in range(nodes)]})
    cfg = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s", "scrape_timeout": "3s",
                      "external_labels": {"cluster": "bench"}},
           "rule_files": [str(rules / "*.yml")], "scrape_configs": jobs}
    path = work / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def source_config(prom_port: int, work: Path, eval_interval: str, interval: str) -> Path:
    """monitor/examples/prometheus-source.yaml pointed at this run's Prometheus."""
    import yaml

    cfg = yaml.safe_load((ROOT / "monitor" / "examples" / "prometheus-source.yaml").read_text())
    cfg.update({"cluster": "bench", "listen": "127.0.0.1:0", "state_db": str(work / "state.db"),
                "eval_interval": eval_interval, "reward_outliers": False})
    cfg["prometheus"].update({"url": f"http://127.0.0.1:{prom_port}", "interval": interval, "lookback": "1m"})
    return write_monitor_config(work, cfg)


def write_monitor_config(work: Path, cfg: dict[str, Any]) -> Path:
    import yaml

    path = work / "monitor.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def query_requests(port: int) -> float | None:
    """query_range requests Prometheus has answered (its own /metrics)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
               if ln.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query_range"' in ln)


def monitor_config(port: int, nodes: int, work: Path, eval_interval: str) -> Path:
    base = f"http://127.0.0.1:{port}"
    targets = [{"name": f"gpu-{n:03d}-{kind}", "url": f"{base}/gpu-{n:03d}/{kind}/metrics", "node": f"gpu-{n:03d}",
                "job": "dcgm" if kind == "dcgm" else "verl", "interval": "5s", "timeout": "3s"}
               for n in range(nodes) for kind in ("dcgm", "trainer")]
    cfg = {"cluster": "bench", "listen": "127.0.0.1:0", "state_db": str(work / "state.db"),
           "eval_interval": eval_interval, "reward_outliers": False, "targets": targets,
           "limits": {"max_series": 200000, "max_series_per_metric": 50000}}
    return write_monitor_config(work, cfg)


def prom_head_series(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status/tsdb", timeout=10) as resp:
            return int(json.load(resp)["data"]["headStats"]["numSeries"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prom_query(port: int, expr: str) -> float | None:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            res = json.load(resp)["data"]["result"]
        return float(res[0]["value"][1]) if res else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


LAG_PARTS = ("scrape", "ingest", "wait", "tick")  # fetch + parse, ingest, wait for the next tick, the tick


def lag_breakdown(stats: dict[str, Any], w0: float, w1: float) -> dict[str, Any]:
    """Where the eval lag goes: each part's p99 over the window's scrapes, the parts' mean over the
    slowest 1 % of them (what the eval-lag p99 is made of), and the event loop's own timer lateness p99."""
    from benchmarks.monitor_scale import p99

    rows = [r[1:] for r in stats.get("lag_parts", []) if w0 <= r[0] <= w1]
    if not rows:
        return {}
    worst = sorted(rows, key=sum)[-max(1, len(rows) // 100):]
    return {"eval_lag_parts_p99": {k: p99([r[i] for r in rows]) for i, k in enumerate(LAG_PARTS)},
            "eval_lag_worst_1pct_mean_parts": {k: round(sum(r[i] for r in worst) / len(worst), 4)
                                               for i, k in enumerate(LAG_PARTS)},
            "event_loop_lag_p99_seconds": p99([v for t, v in stats.get("loop_lags", []) if w0 <= t <= w1])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=125)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--duration", type=float, default=120.0, help="measured seconds (after --warmup)")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds excluded at the start")
    p.add_argument("--eval-interval", default="500ms", help="monitor eval_interval (its default)")
    p.add_argument("--prometheus", default="prometheus", help="the prometheus binary")
    p.add_argument("--mode", choices=("side-by-side", "prometheus-source"), default="side-by-side",
                   help="prometheus-source: Prometheus scrapes, the monitor reads it (monitor/examples/prometheus-source.yaml)")
    p.add_argument("--source-interval", default="15s", help="prometheus-source: the monitor's query interval")
    p.add_argument("--fault-after", type=float, metavar="SECONDS",
                   help="inject the load generator's fault (one reward-model OOM on one node) this long into the "
                        f"measured window; detection delay = first {FAULT_ALERT} firing - fault shown")
    p.add_argument("--faults", type=int, default=1, help="faults to inject, each on the next node")
    p.add_argument("--fault-every", type=float, default=20.0, help="seconds between the faults")
    p.add_argument("--victoria-metrics", action="store_true",
                   help="also run VictoriaMetrics + vmalert on the same targets and rules (apt-get installs them if missing)")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    args = p.parse_args(argv)
    binary = shutil.which(args.prometheus)
    if binary is None:
        print(f"error: no `{args.prometheus}` binary on PATH; install Debian's prometheus (make promtool) "
              "or pass --prometheus PATH", file=sys.stderr)
        return 2
    if args.nodes < 1 or args.gpus < 1 or args.duration <= 0:
        print("error: --nodes, --gpus and --duration must be positive", file=sys.stderr)
        return 2
    if args.victoria_metrics and args.mode != "side-by-side":
        print("error: --victoria-metrics runs beside the side-by-side mode only; drop --mode", file=sys.stderr)
        return 2
    if args.victoria_metrics and (err := _victoria.ensure_installed()) is not None:
        print(err, file=sys.stderr)
        return 2
    import psutil

    from benchmarks.monitor_scale import p99

    work = Path(tempfile.mkdtemp(prefix="verl-monitor-vs-prom-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a stopped run still stops its children (finally)
    children: list[subprocess.Popen[Any]] = []
    sink: http.server.ThreadingHTTPServer | None = None
    try:
        first = time.monotonic() + args.warmup + (args.fault_after or 0.0)
        fault = (["--fault-at", *(str(first + i * args.fault_every) for i in range(args.faults)),
                  "--fault-file", str(work / "fault.json")] if args.fault_after is not None else [])
        gen = subprocess.Popen([sys.executable, str(SCALE), "--serve", "--nodes", str(args.nodes),
                                "--gpus", str(args.gpus), *fault], stdout=subprocess.PIPE, text=True)
        children.append(gen)
        assert gen.stdout is not None
        info = json.loads(gen.stdout.readline())
        prom_port = free_port()
        prom_log = open(work / "prom.log", "w")  # noqa: SIM115 - the child writes it until the end
        source = args.mode == "prometheus-source"
        rule_files = SIDE_BY_SIDE_RULES + (SOURCE_RULES if source else ())
        prom_yml = prometheus_config(info["port"], args.nodes, work, rule_files)
        prom = subprocess.Popen([binary, f"--config.file={prom_yml}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                                 "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=prom_log)
        children.append(prom)
        total = args.warmup + args.duration
        mon_cfg = (source_config(prom_port, work, args.eval_interval, args.source_interval) if source
                   else monitor_config(info["port"], args.nodes, work, args.eval_interval))
        mon = subprocess.Popen([sys.executable, str(SCALE), "--run-monitor", str(mon_cfg),
                                "--seconds", str(total + 5), "--stats", str(work / "stats.json")])
        children.append(mon)
        procs = {"prometheus": psutil.Process(prom.pid), "monitor": psutil.Process(mon.pid)}
        if args.victoria_metrics:
            vm_port, vmalert_port = free_port(), free_port()
            (vm, vmalert), sink = _victoria.start(prom_yml, work, vm_port, vmalert_port, prom_log)
            children += [vm, vmalert]
            procs |= {"victoria_metrics": psutil.Process(vm.pid), "vmalert": psutil.Process(vmalert.pid)}
        started = time.monotonic()
        rss = dict.fromkeys(procs, 0)
        by_minute: dict[str, list[int]] = {k: [] for k in procs}
        now_rss = dict(rss)
        cpu0: dict[str, float] = {}
        q0, load0, w0 = None, 0.0, started + args.warmup
        cpu1, w1 = {}, w0
        while time.monotonic() - w0 < args.duration:
            if any(c.poll() is not None for c in children[1:]):
                print(f"error: a process ended early (see {work / 'prom.log'})", file=sys.stderr)
                return 1
            now_rss = {k: pr.memory_info().rss for k, pr in procs.items()}
            elapsed = time.monotonic() - started
            if elapsed >= 60.0 * len(by_minute["monitor"]):  # minute 0, 1, 2, ... of the run
                for k in procs:
                    by_minute[k].append(now_rss[k])
            if not cpu0 and elapsed >= args.warmup:
                cpu0 = {k: sum(pr.cpu_times()[:2]) for k, pr in procs.items()}
                q0, load0, w0 = query_requests(prom_port), os.getloadavg()[0], time.monotonic()
            if cpu0:
                for k in procs:
                    rss[k] = max(rss[k], now_rss[k])
                cpu1, w1 = {k: sum(pr.cpu_times()[:2]) for k, pr in procs.items()}, time.monotonic()
            time.sleep(1.0)
        load1 = os.getloadavg()[0]
        q1 = query_requests(prom_port)
        up = prom_query(prom_port, "sum(up)")
        head = prom_head_series(prom_port)
        if args.victoria_metrics:  # it did the same work: every target up, every rule group loaded
            vm_up = prom_query(vm_port, "sum(up)")
            vm_groups = _victoria.rule_groups(vmalert_port)
        mon.wait(timeout=120)
        stats = json.loads((work / "stats.json").read_text())
        shown = json.loads((work / "fault.json").read_text()) if (work / "fault.json").exists() else {}
    finally:
        if sink is not None:
            sink.shutdown()
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(15)
                except subprocess.TimeoutExpired:
                    child.kill()
        shutil.rmtree(work, ignore_errors=True)
    cores = {k: (cpu1[k] - cpu0[k]) / (w1 - w0) for k in procs}
    lags = [v for t, v in stats["eval_lags"] if w0 <= t <= w1]
    result = {
        "benchmark": "monitor_vs_prometheus", "mode": args.mode, "gpus": args.nodes * args.gpus,
        "targets": info["targets"],
        "exposed_lines": info["lines"], "monitor_series": stats["series"],
        "prometheus_head_series": head, "prometheus_targets_up": up, "measured_seconds": round(w1 - w0, 1),
        "prometheus_cpu_cores": round(cores["prometheus"], 3), "monitor_cpu_cores": round(cores["monitor"], 3),
        "prometheus_peak_rss_bytes": rss["prometheus"], "monitor_peak_rss_bytes": rss["monitor"],
        "cpu_ratio": round(cores["monitor"] / cores["prometheus"], 2) if cores["prometheus"] else None,
        "rss_ratio": round(rss["monitor"] / rss["prometheus"], 2) if rss["prometheus"] else None,
        "eval_lag_p99_seconds": p99(lags), "monitor_alerts_firing": stats["firing"],
        "query_range_per_second": round((q1 - q0) / (w1 - w0), 3) if q0 is not None and q1 is not None else None,
        "cpu_count": os.cpu_count(), "loadavg_1m": [round(load0, 2), round(load1, 2)],
    }
    for k in procs:  # the last sample: what each side holds at the end
        by_minute[k].append(now_rss[k])
    result["final_rss_bytes"] = {k: v[-1] for k, v in by_minute.items()}
    result["rss_by_minute_bytes"] = by_minute
    if len(by_minute["monitor"]) > 16:
        result["monitor_rss_growth_from_min15"] = round(by_minute["monitor"][-1] / by_minute["monitor"][15] - 1, 3)
    final = result["final_rss_bytes"]
    result["final_rss_ratio"] = round(final["monitor"] / final["prometheus"], 2)
    if args.victoria_metrics:
        vm_cores = cores["victoria_metrics"] + cores["vmalert"]
        vm_final = final["victoria_metrics"] + final["vmalert"]
        result.update({"victoria_targets_up": vm_up, "vmalert_rule_groups": vm_groups,
                       "victoria_cpu_cores": round(vm_cores, 3), "victoria_final_rss_bytes": vm_final,
                       "victoria_peak_rss_bytes": max(a + b for a, b in zip(by_minute["victoria_metrics"],
                                                                             by_minute["vmalert"], strict=True)),
                       "cpu_ratio_victoria": round(cores["monitor"] / vm_cores, 2) if vm_cores else None,
                       "final_rss_ratio_victoria": round(final["monitor"] / vm_final, 2)})
    if not source:  # a starved monitor skips scrapes and then uses less CPU: this shows whether it kept up
        result["monitor_scrapes_ingested"] = sum(1 for t, _ in stats["ingest_lags"] if w0 <= t <= w1)
        result["scrapes_due"] = int(info["targets"] * (w1 - w0) / 5.0)
    result.update(lag_breakdown(stats, w0, w1))
    if args.fault_after is not None:  # null: shown but not detected within the run
        fired = {node: stats["first_fired"].get(f"{FAULT_ALERT} {node}") for node in sorted(shown)}
        result["faults_shown"] = len(shown)
        result["detection_delays_seconds"] = [round(f - shown[n], 2) if f is not None and f >= shown[n] else None
                                              for n, f in fired.items()]
        found = sorted(d for d in result["detection_delays_seconds"] if d is not None)
        result["detection_delay_median_seconds"] = found[len(found) // 2] if found else None
        result["detection_delay_max_seconds"] = found[-1] if found else None
    if not args.json:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
