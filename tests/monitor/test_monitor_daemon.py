"""The daemon against real loopback HTTP targets: bad targets are counted per target and never stop
or delay the good one; the API surface; kill -9 and restart mid-incident with SQLite."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import DRIFTING, RunningDaemon, Targets, metric, wait_for

from harness.ports import free_port

RULES = {"rules": [{"alert": "RewardModelCircuitOpen", "severity": "P1",
                    "select": "verl_reward_model_circuit_state",
                    "detector": {"type": "threshold", "op": ">=", "value": 2},
                    "summary": "circuit open on {{ labels.node }}"}]}


def write_config(tmp: Path, targets: list[dict], **extra: object) -> Path:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(RULES))
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.1s",
           "rules": ["rules.yaml"], "targets": targets, "cluster": "test", **extra}
    path = tmp / "monitor.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def targets():
    t = Targets()
    yield t
    t.close()


def test_bad_targets_are_counted_and_do_not_disturb_the_good_one(tmp_path: Path, targets: Targets) -> None:
    tg = [{"name": n, "url": f"{targets.url}/{n}", "node": "gpu-08", "interval": "0.2s", "timeout": "0.5s"}
          for n in ("good", "malformed", "nonfinite", "hang", "error")]
    d = RunningDaemon(write_config(tmp_path, tg))
    try:
        assert wait_for(lambda: (metric(d.url, "verl_monitor_scrape_errors_total", target="hang", reason="timeout")
                                 or 0) >= 2, timeout=15)
        # the good target kept its own 0.2 s cadence while /hang timed out at 0.5 s each time
        good_hits = targets.hits.get("/good", 0)
        assert good_hits >= 1.5 * targets.hits.get("/hang", 0)  # serial scraping would give 1:1
        assert metric(d.url, "verl_monitor_target_up", target="good") == 1
        assert metric(d.url, "verl_monitor_target_up", target="hang") == 0
        assert metric(d.url, "verl_monitor_target_up", target="error") == 0
        assert metric(d.url, "verl_monitor_scrape_errors_total", target="error", reason="http_500") >= 1
        assert metric(d.url, "verl_monitor_scrape_errors_total", target="malformed", reason="malformed_line") >= 2
        assert metric(d.url, "verl_monitor_scrape_errors_total", target="nonfinite", reason="nonfinite_value") >= 3
        # valid lines of the malformed / non-finite targets still count
        assert metric(d.url, "verl_monitor_samples_ingested_total", source="malformed") >= 2
        assert metric(d.url, "verl_monitor_samples_ingested_total", source="nonfinite") >= 1
        assert metric(d.url, "verl_monitor_samples_ingested_total", source="good") >= 2
        # and the good target's alert fires with the contract labels
        assert wait_for(lambda: any(a["labels"]["alertname"] == "RewardModelCircuitOpen" and a["state"] == "firing"
                                    for a in httpx.get(f"{d.url}/api/v1/alerts").json()["data"]))
        a = next(a for a in httpx.get(f"{d.url}/api/v1/alerts").json()["data"] if a["state"] == "firing")
        assert a["labels"] == {"alertname": "RewardModelCircuitOpen", "severity": "P1", "cluster": "test",
                               "node": "gpu-08"}
        assert a["annotations"]["summary"] == "circuit open on gpu-08"
        assert metric(d.url, "verl_monitor_alerts_firing", alertname="RewardModelCircuitOpen", severity="P1") == 1
        assert httpx.get(f"{d.url}/healthz").json()["status"] == "ok"
    finally:
        d.stop()


def test_api_bearer_token_webhook_and_plots(tmp_path: Path) -> None:
    d = RunningDaemon(write_config(tmp_path, [], bearer_token="s3cret"))
    try:
        assert httpx.get(f"{d.url}/api/v1/alerts").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        payload = {"version": "4", "status": "firing", "receiver": "verl-monitor", "alerts": [
            {"status": "firing", "labels": {"alertname": "GPUOverTemperature", "severity": "critical",
                                            "instance": "gpu-05:9400", "gpu": "3"},
             "annotations": {"summary": "hot"}, "startsAt": "2026-01-01T00:00:00.123456789Z",
             "endsAt": "0001-01-01T00:00:00Z"}]}
        r = httpx.post(f"{d.url}/api/v1/alertmanager/webhook", json=payload, headers=auth)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        # a repeat of the same firing alert is not a new alert
        assert httpx.post(f"{d.url}/api/v1/alertmanager/webhook", json=payload, headers=auth).json()["accepted"] == 0
        alerts = httpx.get(f"{d.url}/api/v1/alerts", headers=auth).json()["data"]
        assert [a["labels"]["node"] for a in alerts] == ["gpu-05"]
        assert alerts[0]["labels"]["severity"] == "P1"  # catalogue severity for GPUOverTemperature
        bad = httpx.post(f"{d.url}/api/v1/alertmanager/webhook", content=b"{nope", headers=auth)
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]
        assert httpx.get(f"{d.url}/api/v1/plots/missing.png", headers=auth).status_code == 404
        assert httpx.get(f"{d.url}/api/v1/silences", headers=auth).status_code == 503  # no notify_config
        plots = tmp_path / "state" / "plots"
        plots.mkdir(parents=True, exist_ok=True)
        (plots / "x.png").write_bytes(b"\x89PNG fake")
        r = httpx.get(f"{d.url}/api/v1/plots/x.png", headers=auth)
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert httpx.get(f"{d.url}/metrics").status_code == 200  # scrapers need no token
    finally:
        d.stop()


@pytest.mark.slow
def test_kill_9_and_restart_mid_incident_restores_firing_alert_without_duplicates(tmp_path: Path,
                                                                                    targets: Targets) -> None:
    port = free_port()
    cfg = write_config(tmp_path, [{"name": "trainer", "url": f"{targets.url}/good", "node": "gpu-08",
                                   "interval": "0.2s"}])
    data = yaml.safe_load(cfg.read_text())
    data["listen"] = f"127.0.0.1:{port}"
    cfg.write_text(yaml.safe_dump(data))
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def start() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config", str(cfg)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: _firing(url), timeout=30), "alert did not fire"
        return p

    def _firing_list() -> list[dict]:
        return [a for a in httpx.get(f"{url}/api/v1/alerts", timeout=2).json()["data"] if a["state"] == "firing"]

    def _firing(u: str) -> bool:
        try:
            return bool(_firing_list())
        except httpx.HTTPError:
            return False

    p = start()
    first = _firing_list()
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    p = start()
    try:
        again = _firing_list()
        assert [a["fingerprint"] for a in again] == [a["fingerprint"] for a in first]
        assert again[0]["startsAt"] == first[0]["startsAt"]
    finally:
        p.terminate()
        p.wait(10)
    db = sqlite3.connect(tmp_path / "state" / "state.db")
    rows = db.execute("SELECT fingerprint, status, record FROM alert_events").fetchall()
    assert len(rows) == 1 and rows[0][1] == "firing"
    assert json.loads(rows[0][2])["labels"]["alertname"] == "RewardModelCircuitOpen"


def test_bad_config_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In process: a config error ends before the daemon starts, so a subprocess would prove nothing more
    (the taken port below goes through the daemon's start and stays a real process)."""
    from monitor.cli import main

    cfg = tmp_path / "m.yaml"
    cfg.write_text("targets:\n  - {url: 'ftp://x'}\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "targets[0].url" in err
    cfg.write_text("listen: 127.0.0.1:0\nbogus: 1\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "Traceback" not in err


def test_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = tmp_path / "m.yaml"
        cfg.write_text(f"listen: 127.0.0.1:{port}\nstate_db: {tmp_path}/s.db\n")
        r = subprocess.run([sys.executable, "-m", "monitor.cli", "run", "--config", str(cfg)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr


def test_reward_drift_alert_carries_top_3_prompts_and_silences_api(tmp_path: Path, targets: Targets) -> None:
    rules = {"rules": [{"alert": "RewardDistributionDrift", "severity": "P2", "select": "verl_reward_std",
                        "detector": {"type": "threshold", "op": ">", "value": 0.8}, "summary": "std high"}]}
    (tmp_path / "drift.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "hook", "type": "webhook", "url": f"{targets.url}/hook"}],
        "route": {"receiver": "hook"}}))
    cfg = write_config(tmp_path, [{"name": "trainer", "url": f"{targets.url}/drifting", "node": "gpu-04",
                                   "interval": "0.2s"}], notify_config="alerting.yaml")
    data = yaml.safe_load(cfg.read_text())
    data["rules"] = ["drift.yaml"]
    cfg.write_text(yaml.safe_dump(data))
    # The prompts come from their own source (every 10 s): the std drifts only once the first fetch is
    # filed, since an alert that starts before it carries none (nothing is known yet to carry).
    targets.bodies["/drifting"] = "verl_reward_std 0.5\n"
    d = RunningDaemon(cfg)
    try:
        def drift() -> list[dict]:
            return [a for a in httpx.get(f"{d.url}/api/v1/alerts").json()["data"] if a["state"] == "firing"]
        assert wait_for(lambda: d.daemon.sources.states["reward outliers"].last_round is not None)
        assert not drift()
        targets.bodies["/drifting"] = DRIFTING
        assert wait_for(lambda: bool(drift()))
        ann = drift()[0]["annotations"]
        assert ann["top_prompts"].splitlines()[0] == "-4.1: Q: 2+2? A: fish"
        assert len(ann["top_prompts"].splitlines()) == 3 and "Top anomalous prompts" in ann["description"]
        r = httpx.post(f"{d.url}/api/v1/silences", json={"matchers": ['alertname="RewardDistributionDrift"'],
                                                          "duration": "1h", "comment": "known"})
        assert r.status_code == 200
        sid = r.json()["silenceID"]
        listed = httpx.get(f"{d.url}/api/v1/silences").json()["data"]
        assert [s["id"] for s in listed] == [sid]
        assert httpx.delete(f"{d.url}/api/v1/silences/{sid}").status_code == 200
        assert httpx.post(f"{d.url}/api/v1/silences", json={"comment": "no matchers"}).status_code == 400
        assert httpx.get(f"{d.url}/api/v1/incidents").json()["status"] == "success"
        assert metric(d.url, "verl_alerting_outbox_depth") is not None  # engine metrics on our /metrics
    finally:
        d.stop()


def test_jsonl_and_dmon_file_sources(tmp_path: Path) -> None:
    log = tmp_path / "exp.jsonl"
    log.write_text(json.dumps({"step": 1, "data": {"actor/ppo_kl": 0.02, "perf/throughput": 9000}}) + "\n")
    dmon = tmp_path / "dmon.log"
    dmon.write_text((Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-dmon-sample.txt").read_text())
    d = RunningDaemon(write_config(tmp_path, [], jsonl=[{"path": "exp.jsonl", "node": "gpu-08"}],
                                   dmon=[{"path": "dmon.log", "node": "gpu-08"}]))
    try:
        assert wait_for(lambda: (metric(d.url, "verl_monitor_samples_ingested_total", source="jsonl:exp.jsonl")
                                 or 0) >= 3)
        assert wait_for(lambda: (metric(d.url, "verl_monitor_samples_ingested_total", source="dmon0") or 0) == 30)
        with log.open("a") as fh:
            fh.write("not json\n")
        assert wait_for(lambda: metric(d.url, "verl_monitor_scrape_errors_total", target="jsonl:exp.jsonl",
                                       reason="malformed_json") == 1)
        assert metric(d.url, "verl_monitor_series") >= 8
    finally:
        d.stop()


@pytest.mark.parametrize("how", ["stop", "cancel"])
def test_evaluation_runs_beside_the_scrape_loop_and_ends_with_run(tmp_path: Path, how: str) -> None:
    """The tick and the book's commit run on the thread `evaluation`, never on the loop that scrapes; run()
    stopped or cancelled (a signal, a supervisor), that thread ends before the pipeline is closed."""
    import asyncio
    import contextlib
    import threading

    from monitor.config import load_config
    from monitor.daemon import Daemon

    d = Daemon(load_config(write_config(tmp_path, [])))
    ticked_on: list[str] = []
    tick = d.pipeline.tick
    d.pipeline.tick = lambda: ticked_on.append(threading.current_thread().name) or tick()  # type: ignore[method-assign]

    def evaluating() -> bool:
        return any(t.name == "evaluation" and t.is_alive() for t in threading.enumerate())

    async def go() -> None:
        ready = threading.Event()
        task = asyncio.create_task(d.run(ready))
        while not ready.is_set() or not ticked_on:
            await asyncio.sleep(0.02)
        assert evaluating() and threading.current_thread().name not in ticked_on
        if how == "stop":
            d.stop()
        else:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(go())
        assert set(ticked_on) == {"evaluation"} and not evaluating()
    finally:
        d.close()
