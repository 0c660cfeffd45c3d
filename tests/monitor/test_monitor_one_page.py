"""One outage, one alert: the monitor's own TrainerDown and Prometheus' (through the Alertmanager
webhook) share labels and fingerprint, page once in either order, and resolve only when neither side
holds them; `node` comes from the target's host on every series; `verl-monitor run` needs no config."""

from __future__ import annotations

import asyncio
import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from alerting.clock import SimulatedClock
from alerting.model import Alert
from monitor.cli import main
from monitor.config import DEFAULT_TARGET, MonitorConfigError
from monitor.evaluation.rules import load_rule_files
from monitor.pipeline import Pipeline
from monitor.run_flags import default_config, target_from_url
from monitor.sources.alertmanager import parse_webhook
from monitor.sources.prom_text import Target, scrape
from tests.monitor.recording_sink import RecordingSink

T0 = 1_800_000_000.0


Recorder = RecordingSink  # what the engine took from the book's log, in order


def prometheus_trainer_down(status: str = "firing") -> dict[str, Any]:
    """What Alertmanager posts for prometheus/rules/verl-alerts.yml's TrainerDown (labels as relabelled)."""
    return {"version": "4", "status": status, "alerts": [{
        "status": status,
        "labels": {"alertname": "TrainerDown", "severity": "P0", "job": "verl-trainer", "instance": "127.0.0.1:8000",
                   "node": "127.0.0.1", "cluster": "default", "prometheus": "monitoring/k8s", "pod": "prom-0"},
        "annotations": {"summary": "Trainer 127.0.0.1:8000 is down"},
        "startsAt": "2027-01-15T08:00:05.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2027-01-15T08:10:00Z",
        "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=up%7Bjob%3D%22verl-trainer%22%7D+%3D%3D+0"}]}


def make(tmp_path: Path) -> tuple[Pipeline, SimulatedClock, Recorder]:
    clock, engine = SimulatedClock(T0), Recorder()
    p = Pipeline(load_rule_files(None), clock, db_path=tmp_path / "state.db", engine=engine)
    p.set_base_url("http://127.0.0.1:9105")
    return p, clock, engine


def scrape_up(p: Pipeline, clock: SimulatedClock, until: float, value: float) -> None:
    """The monitor's own scrape of 127.0.0.1:8000: the `up` sample prom_text.scrape yields."""
    labels = {"job": "verl", "target": DEFAULT_TARGET, "instance": "127.0.0.1:8000", "node": "127.0.0.1"}
    while clock.now() < until:
        clock.advance(5)
        s = p.series("up", labels)
        assert s is not None
        p.observe(s, clock.now(), value)
        p.tick()


def firing_pages(engine: Recorder) -> list[Alert]:
    return [a for a in engine.submitted if a.name == "TrainerDown" and a.status == "firing"]


def test_prometheus_alert_gets_the_monitors_labels_and_fingerprint(tmp_path: Path) -> None:
    (incoming,) = parse_webhook(prometheus_trainer_down(), "default")
    assert incoming.labels == {"alertname": "TrainerDown", "severity": "P0", "node": "127.0.0.1", "cluster": "default"}
    assert incoming.generator_url.startswith("http://127.0.0.1:9090/graph")
    p, clock, engine = make(tmp_path)
    scrape_up(p, clock, T0 + 90, 0.0)
    (own,) = firing_pages(engine)
    assert own.fingerprint == incoming.fingerprint
    assert own.generator_url == f"http://127.0.0.1:9105/api/v1/alerts/{own.fingerprint}"
    assert own.annotations["description"].startswith("Trainer metrics endpoint")
    p.close()


def test_own_first_then_prometheus_pages_once_and_waits_for_both_to_resolve(tmp_path: Path) -> None:
    p, clock, engine = make(tmp_path)
    scrape_up(p, clock, T0 + 90, 0.0)
    assert p.submit_external(parse_webhook(prometheus_trainer_down(), "default")) == []
    assert len(firing_pages(engine)) == 1
    scrape_up(p, clock, T0 + 120, 1.0)  # the monitor sees it back up, Prometheus not yet
    assert [a.status for a in engine.submitted] == ["firing"] and len(p.book.firing()) == 1
    (resolved,) = p.submit_external(parse_webhook(prometheus_trainer_down("resolved"), "default"))
    assert resolved.status == "resolved" and [a.status for a in engine.submitted] == ["firing", "resolved"]
    p.close()


def test_prometheus_first_then_own_pages_once_and_survives_prometheus_resolving_early(tmp_path: Path) -> None:
    p, clock, engine = make(tmp_path)
    scrape_up(p, clock, T0 + 30, 0.0)  # pending in the monitor (for: 1m)
    (first,) = p.submit_external(parse_webhook(prometheus_trainer_down(), "default"))
    assert first.generator_url.startswith("http://127.0.0.1:9090/")  # the incoming one is kept
    scrape_up(p, clock, T0 + 120, 0.0)  # the monitor's own rule fires on the same outage
    assert len(firing_pages(engine)) == 1
    # Prometheus resolves first while the monitor still sees the trainer down: still one open alert,
    # no resolved-then-firing-again flap (which would be a second page)
    assert p.submit_external(parse_webhook(prometheus_trainer_down("resolved"), "default")) == []
    scrape_up(p, clock, T0 + 180, 0.0)
    assert [a.status for a in engine.submitted] == ["firing"]
    scrape_up(p, clock, T0 + 200, 1.0)
    assert [a.status for a in engine.submitted] == ["firing", "resolved"]
    p.close()


def test_alert_held_by_alertmanager_survives_a_restart(tmp_path: Path) -> None:
    p, clock, engine = make(tmp_path)
    p.submit_external(parse_webhook(prometheus_trainer_down(), "default"))
    p.close()
    p, clock, engine = make(tmp_path)
    clock.advance(3600)  # far past the restore grace: Alertmanager, not a detector, holds this one
    p.tick()
    (held,) = p.book.firing()
    assert held.generator_url.startswith("http://127.0.0.1:9090/") and engine.submitted == []
    assert p.submit_external(parse_webhook(prometheus_trainer_down("resolved"), "default"))[0].status == "resolved"
    p.close()


EXPOSITION = """# TYPE verl_global_step gauge
verl_global_step 7
# TYPE verl_gpu_memory_used_bytes gauge
verl_gpu_memory_used_bytes{gpu="0"} 1e9
verl_config_info{node="gpu-08",model="tiny"} 1
DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="dgx-3"} 60
"""


def test_every_series_of_a_target_gets_the_targets_host_as_node() -> None:
    transport = httpx.MockTransport(lambda req: httpx.Response(200, text=EXPOSITION))

    async def go(target: Target) -> dict[str, str]:
        async with httpx.AsyncClient(transport=transport) as client:
            batch, _, up = await scrape(client, target, T0)
        assert up
        return {s.name: s.labels["node"] for s in batch.samples}

    nodes = asyncio.run(go(target_from_url("http://10.0.3.7:8000/metrics")))
    assert nodes == {"verl_global_step": "10.0.3.7", "verl_gpu_memory_used_bytes": "10.0.3.7",
                     "verl_config_info": "gpu-08", "DCGM_FI_DEV_GPU_TEMP": "dgx-3", "up": "10.0.3.7"}
    configured = asyncio.run(go(Target("t", "http://10.0.3.7:8000/metrics", node="gpu-07")))
    assert set(configured.values()) == {"gpu-07"}


def test_default_config_watches_the_local_trainer() -> None:
    cfg = default_config()
    assert [t.url for t in cfg.targets] == ["http://127.0.0.1:8000/metrics"] and cfg.targets[0].job == "verl"
    assert cfg.rules == [] and cfg.notify_config is None and cfg.prints_alerts
    assert (cfg.host, cfg.port) == ("127.0.0.1", 9105)
    assert [t.url for t in default_config(["gpu-08:8000", "https://h/x/metrics"]).targets] == [
        "http://gpu-08:8000/metrics", "https://h/x/metrics"]
    # where: a local trainer is this machine (its host name), a remote one its host part; --node/--cluster say otherwise
    from monitor.run_flags import label_and_rules

    assert label_and_rules(cfg).targets[0].node == socket.gethostname().split(".")[0] and cfg.cluster == "default"
    assert [t.node for t in label_and_rules(default_config(["gpu-08:8000", "localhost:8001"])).targets] == [
        None, socket.gethostname().split(".")[0]]
    named = label_and_rules(default_config(["127.0.0.1:8000"]), node="gpu-08", cluster="llama3")
    assert named.targets[0].node == "gpu-08" and named.cluster == "llama3"
    with pytest.raises(MonitorConfigError, match="--target"):
        default_config(["ftp://x"])
    with pytest.raises(MonitorConfigError, match="--notify-config"):
        default_config(notify_config="/nonexistent/alerting.yaml")


def test_help_speaks_to_users(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        assert "SUBCOMMANDS" not in text and "register" not in text and "``" not in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "--target URL" in text and "--notify-config FILE" in text and "127.0.0.1:8000" in text


class _MovingOOMCounter(http.server.BaseHTTPRequestHandler):
    """A trainer whose reward model runs out of memory at every scrape."""

    hits = 0

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).hits += 1
        data = f'verl_oom_events_total{{component="reward"}} {type(self).hits}\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.slow
def test_run_without_config_prints_alerts(tmp_path: Path) -> None:
    """`verl-monitor run --target host:port`, no file: the alert is printed on stdout."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MovingOOMCounter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--listen", "127.0.0.1:0",
                             "--target", f"127.0.0.1:{server.server_address[1]}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    deadline = time.time() + 60
    while not lines and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    server.shutdown()
    assert lines, err
    host = socket.gethostname().split(".")[0]
    # a trainer on this machine is labelled with its host name, not "127.0.0.1"; the first line names the console
    assert "FIRING" in lines[0] and "P1 RewardModelOOM" in lines[0] and f"node={host}" in lines[0], lines
    first = err.splitlines()[0]
    assert first.startswith("verl-monitor: console on http://127.0.0.1:") and f"as node={host}" in first, err
    assert "--node NAME" in first and (tmp_path / "verl-monitor/state.db").is_file()


def test_run_flag_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from monitor.config import load_config

    assert main(["run", "--target", "ftp://gpu-08:8000"]) == 2
    assert main(["run", "--notify-config", str(tmp_path / "missing.yaml")]) == 2
    assert main(["run", "--listen", "9105"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("verl-monitor: --") for line in err), err
    assert "Traceback" not in "".join(err)
    bad = tmp_path / "monitor.yaml"
    bad.write_text("console: yes please\n")
    with pytest.raises(MonitorConfigError, match="console: expected true or false"):
        load_config(bad)
    assert default_config().fix("listen") == "pass --listen HOST:PORT"


def test_prometheus_alert_takes_the_node_name_the_monitor_gives_that_target() -> None:
    named = {"127.0.0.1:8000": "gpu-08"}  # the monitor's target: {url: http://127.0.0.1:8000/metrics, node: gpu-08}
    (a,) = parse_webhook(prometheus_trainer_down(), "default", named)
    assert a.labels["node"] == "gpu-08"
    payload = prometheus_trainer_down()
    payload["alerts"][0]["labels"]["node"] = "gpu-99"  # named in Prometheus too: that name stands
    assert parse_webhook(payload, "default", named)[0].labels["node"] == "gpu-99"
    assert parse_webhook(prometheus_trainer_down(), "default", {"10.0.0.1:8000": "x"})[0].labels["node"] == "127.0.0.1"


def test_state_db_from_before_gains_the_new_columns(tmp_path: Path) -> None:
    import json
    import sqlite3

    from monitor.book.alerts import AlertBook

    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript("""
        CREATE TABLE alerts (fingerprint TEXT PRIMARY KEY, labels TEXT NOT NULL, annotations TEXT NOT NULL,
          status TEXT NOT NULL, starts_at REAL NOT NULL, ends_at REAL, value REAL, updated_at REAL NOT NULL);""")
    db.execute("INSERT INTO alerts VALUES (?,?,?,?,?,?,?,?)",
               ("0123456789abcdef", json.dumps({"alertname": "GPUXidError", "severity": "P1"}), "{}", "firing",
                T0, None, 1.0, T0))
    db.commit()
    db.close()
    book = AlertBook(tmp_path / "state.db")
    (restored,) = book.firing()
    assert restored.name == "GPUXidError" and restored.generator_url == ""
    book.close()
