"""End to end on loopback: a real Prometheus server (config derived from prometheus/prometheus.yml) scrapes a
live `verl-train --config ppo_tiny`, a live `verl-monitor run` and a dcgm-exporter stand-in serving the
recorded exporter output; every dashboard query and recording rule must return data, the KL heatmap one
series per layer, no Prometheus alert may fire on the clean run, and the monitor's Prometheus-API source
replaying the run from that server must find nothing."""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # dashboards/ is a tool directory next to the packages, not installed

from dashboards.gen import lint  # noqa: E402
from harness.ports import free_port  # noqa: E402

DCGM_SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter-sample.prom"
DASHBOARDS = ("verl-training.json", "gpu-dcgm.json", "monitor.json")
SCRAPE = "1s"
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval for a 1 s scrape would be 4 s; 10 s tolerates busy CPUs
READY_TIMEOUT_S = 150

pytestmark = pytest.mark.slow


class Stack:
    """Processes and ports of one live run; `prom(query)` asks the Prometheus server."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports = {k: free_port() for k in ("trainer", "monitor", "dcgm", "prometheus")}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.ports['prometheus']}", timeout=10)
        self.started = time.time()

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.tmp / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(argv, cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.tmp / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.http.close()

    def prom(self, query: str, *, range_s: float = 0) -> list[dict]:
        if range_s:
            end = time.time()
            resp = self.http.get("/api/v1/query_range",
                                 params={"query": query, "start": end - range_s, "end": end, "step": 2})
        else:
            resp = self.http.get("/api/v1/query", params={"query": query})
        doc = resp.json()
        assert doc["status"] == "success", f"{query}: {doc}"
        return doc["data"]["result"]


def serve_dcgm_sample(port: int) -> http.server.ThreadingHTTPServer:
    """dcgm-exporter stand-in: the recorded output of a real exporter, served over HTTP."""
    body = DCGM_SAMPLE.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def prometheus_config(stack: Stack) -> dict:
    """The shipped prometheus.yml with loopback test ports, 1 s intervals and absolute rule paths."""
    config = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    config["global"].update(scrape_interval=SCRAPE, evaluation_interval=SCRAPE, scrape_timeout=SCRAPE)
    config["rule_files"] = [str(p) for p in sorted((ROOT / "prometheus/rules").glob("*.yml"))]
    config.pop("alerting", None)  # no Alertmanager here; ALERTS is read from Prometheus itself
    port_of = {"verl-trainer": "trainer", "verl-monitor": "monitor", "dcgm-exporter": "dcgm"}
    for job in config["scrape_configs"]:
        job["scrape_interval"] = SCRAPE
        job["static_configs"] = [{"targets": [f"127.0.0.1:{stack.ports[port_of[job['job_name']]]}"]}]
    return config


def monitor_config(stack: Stack) -> Path:
    alerting = stack.tmp / "alerting.yaml"
    # nothing should be sent on a clean run; the receiver exists so the alerting metrics are registered
    alerting.write_text(yaml.safe_dump({
        "receivers": [{"name": "sink", "type": "webhook", "url": f"http://127.0.0.1:{stack.ports['dcgm']}/hook"}],
        "route": {"receiver": "sink"},
    }))
    path = stack.tmp / "monitor.yaml"
    path.write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{stack.ports['monitor']}",
        "state_db": str(stack.tmp / "monitor/state.db"),
        "eval_interval": "1s",
        "notify_config": str(alerting),
        "targets": [{"name": "trainer", "url": f"http://127.0.0.1:{stack.ports['trainer']}/metrics",
                     "interval": "1s", "timeout": "1s"}],
    }))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus not found; fix: `make promtool` (installs Debian's prometheus package)")
    st = Stack(tmp_path_factory.mktemp("live"))
    dcgm = serve_dcgm_sample(st.ports["dcgm"])
    try:
        st.spawn("trainer", [
            sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny",
            "--metrics-port", str(st.ports["trainer"]), "--metrics-interval", "1",
            "--checkpoint-dir", str(st.tmp / "ckpt"),
            # checkpoint.interval stays at its default (500): like any real run, this one has no checkpoint yet
            "trainer.total_steps=100000", "metrics.data_interval_steps=1", "metrics.hardware_interval_s=1",
            # A healthy run for ~45 s. Even at ppo_tiny's lr the toy policy wobbles now and then (seed 0:
            # reward 0.98 -> 0.64 within six steps around step 120); the reward guard rightly pauses those
            # updates and RewardVarianceSpike fires. This fixture checks dashboards and rules on a clean
            # run, so it trains slower and widens the variance guard.
            "actor.lr=0.0003", "critic.lr=0.0003", "guard.variance_jump=10",
        ])
        st.spawn("monitor", [sys.executable, "-m", "monitor.cli", "run", "--config", str(monitor_config(st))])
        (st.tmp / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(st)))
        st.spawn("prometheus", [
            prometheus, f"--config.file={st.tmp / 'prometheus.yml'}", f"--storage.tsdb.path={st.tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{st.ports['prometheus']}",
        ])
        wait_for_data(st)
        yield st
    finally:
        st.stop()
        dcgm.shutdown()


def wait_for_data(st: Stack) -> None:
    """Until every source has been scraped a few times after the trainer's third step."""
    deadline = time.time() + READY_TIMEOUT_S
    ready_since = None
    while time.time() < deadline:
        st.check_alive()
        try:
            up = {r["metric"]["job"] for r in st.prom("up == 1")}
            steps = st.prom("max(verl_global_step)")
            layers = st.prom("verl_layer_kl")
            monitor = st.prom("verl_monitor_series")
        except (httpx.HTTPError, KeyError, json.JSONDecodeError):
            time.sleep(1)
            continue
        ok = (up >= {"verl-trainer", "verl-monitor", "dcgm-exporter"} and steps
              and float(steps[0]["value"][1]) >= 3 and len(layers) >= 2 and monitor)
        if ok and ready_since is None:
            ready_since = time.time()
        if ready_since is not None and time.time() - ready_since >= 12:  # > RATE_INTERVAL of samples
            return
        time.sleep(1)
    pytest.fail(f"no complete data within {READY_TIMEOUT_S}s; trainer log:\n{st.log_tail('trainer')}\n"
                f"monitor log:\n{st.log_tail('monitor')}\nprometheus log:\n{st.log_tail('prometheus')}")


def gpu_only(expr: str, recorded: dict[str, str]) -> bool:
    """Selects only the trainer's NVML GPU series (directly or through a recording rule)."""
    names: set[str] = set()
    for name in lint.metric_names(expr):
        names |= lint.metric_names(recorded[name]) if name in recorded else {name}
    return bool(names) and all(n.startswith("verl_gpu_") for n in names)


def peer_only(expr: str) -> bool:
    """Selects only verl's peers (vLLM, SGLang, Ray, node_exporter: dashboards/peer-metrics.csv), which this
    stack does not run; their names are checked against the peers' own output in tests/dashboards."""
    names = lint.metric_names(expr)
    return bool(names) and names <= lint.peer_metrics()


def test_every_dashboard_query_returns_data(stack: Stack) -> None:
    recorded = lint.recording_rules()
    has_gpu = bool(stack.prom('count({__name__=~"verl_gpu_.+"})'))
    empty, checked = [], 0
    for name in DASHBOARDS:
        for panel in lint.panels(json.loads((ROOT / "dashboards" / name).read_text())):
            for target in panel["targets"]:
                expr = lint.substitute(target["expr"], {"$__rate_interval": RATE_INTERVAL})
                result = stack.prom(expr, range_s=0 if target.get("instant") else 20)
                checked += 1
                if not result and (has_gpu or not gpu_only(target["expr"], recorded)) and not peer_only(target["expr"]):
                    empty.append(f"{name} / {panel['title']} / {target['refId']}: {expr}")
    assert checked > 90
    assert empty == [], "queries without data:\n" + "\n".join(empty)


def test_variable_queries_offer_values(stack: Stack) -> None:
    for name in DASHBOARDS:
        board = json.loads((ROOT / "dashboards" / name).read_text())
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            match, label = var["definition"][len("label_values("):-1].rsplit(",", 1)
            resp = stack.http.get(f"/api/v1/label/{label.strip()}/values",
                                  params={"match[]": lint.substitute(match)})
            assert resp.json()["data"], f"{name}: variable {var['name']} has no values"


def not_in_dcgm_sample(expr: str) -> bool:
    """Selects only DCGM fields that the real exporter sample served here does not carry (it has no
    DCGM_FI_DEV_XID_ERRORS, which dcgm-exporter exports only where the field is enabled)."""
    names = lint.metric_names(expr)
    sample = DCGM_SAMPLE.read_text()
    return bool(names) and all(n.startswith("DCGM_") and n not in sample for n in names)


def test_every_recording_rule_has_data(stack: Stack) -> None:
    recorded = lint.recording_rules()
    has_gpu = bool(stack.prom('count({__name__=~"verl_gpu_.+"})'))
    empty = [rec for rec, expr in recorded.items()
             if not stack.prom(rec) and (has_gpu or not gpu_only(expr, recorded)) and not not_in_dcgm_sample(expr)]
    assert empty == []


def test_kl_heatmap_has_one_series_per_layer(stack: Stack) -> None:
    board = json.loads((ROOT / "dashboards/verl-training.json").read_text())
    heatmap = next(p for p in lint.panels(board) if p["type"] == "heatmap")
    result = stack.prom(lint.substitute(heatmap["targets"][0]["expr"]), range_s=20)
    layers = [r["metric"].get("layer") for r in result]
    assert len(layers) >= 2 and len(set(layers)) == len(layers) and None not in layers


def test_relabeling_gives_every_series_a_node(stack: Stack) -> None:
    assert {r["metric"]["node"] for r in stack.prom("verl_global_step")} == {"127.0.0.1"}
    hostnames = {r["metric"]["node"] for r in stack.prom("DCGM_FI_DEV_GPU_TEMP")}
    assert hostnames == {"i-030791dc5a37cd257"}  # dcgm's Hostname label wins over the address
    assert stack.prom('count({__name__=~"verl_.+|DCGM_FI_.+|up", node=""})') == []
    # `up` of every job gets its node at target level: an exporter that is down still names its host
    assert {r["metric"]["job"]: r["metric"]["node"] for r in stack.prom("up")} == {
        "verl-trainer": "127.0.0.1", "verl-monitor": "127.0.0.1", "dcgm-exporter": "127.0.0.1"}
    assert stack.prom('count({__name__=~"DCGM_FI_.+", node_source!=""})') == []  # bookkeeping dropped


def test_prometheus_rules_stay_quiet_on_a_clean_run(stack: Stack) -> None:
    # Watchdog always fires (a dead man's switch expects it): its absence is the page, not its presence
    assert stack.prom('ALERTS{alertstate="firing", alertname!="Watchdog"}') == []


def test_monitor_replaying_the_run_from_prometheus_finds_nothing(stack: Stack) -> None:
    from monitor.evaluation.rules import load_rule_files
    from monitor.replay import run_recording
    from monitor.sources.prom_api import query_range
    from monitor.sources.recorded import from_columns

    async def run():  # noqa: ANN202
        async with httpx.AsyncClient() as client:
            return await query_range(client, str(stack.http.base_url).rstrip("/"), '{__name__=~"verl_.+|DCGM_FI_.+"}',
                                     stack.started, time.time(), step=1.0, chunk=3600.0)

    batch = asyncio.run(run())
    assert batch.samples, "the Prometheus-API source read nothing"
    columns: dict[tuple, tuple[str, dict[str, str], list[float], list[float]]] = {}
    for s in batch.samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        col = columns.setdefault(key, (s.name, dict(s.labels), [], []))
        col[2].append(s.t)
        col[3].append(s.value)
    out = io.StringIO()
    result = run_recording(from_columns(list(columns.values()), 0), load_rule_files(None), out)
    assert result.samples > 500
    alerts = [json.loads(line) for line in out.getvalue().splitlines() if '"kind": "alert"' in line]
    assert [f'{a["labels"]["alertname"]}: {a["annotations"].get("summary")}' for a in alerts] == []


def test_replay_cli_over_a_query_range_export_finds_nothing(stack: Stack) -> None:
    """The operator's path: export the run from Prometheus' query_range API, backtest it with the CLI."""
    resp = stack.http.get("/api/v1/query_range", params={
        "query": '{__name__=~"verl_.+|DCGM_FI_.+"}', "start": stack.started, "end": time.time(), "step": 1})
    export = stack.tmp / "query_range.json"
    export.write_bytes(resp.content)
    out = stack.tmp / "replay.jsonl"
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "replay", "--input", str(export),
                             "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [f'{r["labels"]["alertname"]}: {r["annotations"].get("summary")}'
            for r in records if r.get("kind") == "alert"] == []


def test_alertmanager_receiver_reaches_the_monitor_webhook(stack: Stack) -> None:
    """What alertmanager.yml sends (webhook v4) is accepted at the URL path it names, on the live monitor.
    Runs last: it leaves an external alert in the monitor."""
    am = yaml.safe_load((ROOT / "prometheus/alertmanager.yml").read_text())
    url = httpx.URL(am["receivers"][0]["webhook_configs"][0]["url"])
    rule = next(r for r in yaml.safe_load((ROOT / "prometheus/rules/verl-alerts.yml").read_text())["groups"][0]
                ["rules"] if r["alert"] == "TrainingStalled")
    series = stack.prom("verl_heartbeat_timestamp_seconds")[0]["metric"]
    labels = {**{k: v for k, v in series.items() if k != "__name__"}, "alertname": rule["alert"],
              **rule["labels"], "cluster": "default"}
    alert = {"status": "firing", "labels": labels,
             "annotations": {"summary": "Training on 127.0.0.1 made no progress for 7m 0s", "value": "420"},
             "startsAt": "2026-01-01T00:00:00.123456789Z", "endsAt": "0001-01-01T00:00:00Z",
             "generatorURL": "http://127.0.0.1:9090/graph", "fingerprint": "0123456789abcdef"}
    payload = {"version": "4", "groupKey": '{}:{alertname="TrainingStalled"}', "truncatedAlerts": 0,
               "status": "firing", "receiver": am["route"]["receiver"], "groupLabels": {"alertname": rule["alert"]},
               "commonLabels": labels, "commonAnnotations": alert["annotations"],
               "externalURL": "http://127.0.0.1:9093", "alerts": [alert]}
    resp = httpx.post(f"http://127.0.0.1:{stack.ports['monitor']}{url.path}", json=payload, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()["accepted"] == 1
