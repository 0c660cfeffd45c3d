"""Issue 24: chat plot links work for people when the API has a token (signed, expiring); issue 26: the
PNG's path travels with the alert (``Alert.plot_file``), so the WeCom notifier never fetches the
monitor's API over HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml

from alerting.config import parse_config
from alerting.model import Alert, Notification
from alerting.notifiers import build_notifier
from alerting.templates import render
from harness.standin import WeComStandIn
from monitor.book.plotlinks import PlotLinks
from monitor.endpoints.api import MonitorAPI
from tests.alerting.helpers import T0, receiver

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def test_signed_plot_links_open_without_the_token_until_they_expire(tmp_path: Path) -> None:
    (tmp_path / "p.png").write_bytes(PNG)
    links = PlotLinks(tmp_path, "http://127.0.0.1:1/api/v1/plots", "s3cret")
    daemon = SimpleNamespace(pipeline=SimpleNamespace(annotator=SimpleNamespace(plot_links=links)), config=SimpleNamespace(plots_dir=tmp_path))
    api = MonitorAPI(daemon, "127.0.0.1", 0, "s3cret")
    api.start()
    try:
        base = f"http://127.0.0.1:{api.port}/api/v1/plots"
        signed = links.url("p.png").replace("http://127.0.0.1:1/api/v1/plots", base)
        assert httpx.get(signed).content == PNG
        assert httpx.get(f"{base}/p.png").status_code == 401
        assert httpx.get(signed.replace("sig=", "sig=0")).status_code == 401
        other = signed.replace("/p.png", "/q.png")  # a signature names one plot only
        assert httpx.get(other).status_code == 401
        past = int(time.time() - 1)
        assert httpx.get(f"{base}/p.png?exp={past}&sig={links._sig('p.png', past)}").status_code == 401
    finally:
        api.stop()


def test_wecom_sends_the_plot_the_alert_carries_not_over_http(tmp_path: Path) -> None:
    robot = WeComStandIn()
    (tmp_path / "p.png").write_bytes(PNG)
    links = PlotLinks(tmp_path, "http://127.0.0.1:1/api/v1/plots", "s3cret")  # port 1: HTTP would fail
    a = Alert({"alertname": "GPUMemoryLeak", "severity": "P1", "node": "n1"},
              {"summary": "leak", "plot": links.url("p.png")}, starts_at=T0, plot_file=str(tmp_path / "p.png"))
    notes = [Notification("wecom", "g", {}, "firing", [a], [a.fingerprint], T0)]
    cfg = parse_config({"receivers": [receiver("wecom", robot)]}).receivers["wecom"]
    n = build_notifier(cfg)
    try:
        res = n.send(render(notes, max_bytes=n.max_bytes, dialect="wecom"), notes)
    finally:
        n.close()
        robot.close()
    assert res.ok and not res.error
    kinds = [r.body["msgtype"] for r in robot.received]
    assert kinds == ["markdown", "image"]


def test_the_annotate_stage_puts_the_signed_link_and_the_png_path_on_the_alert(tmp_path: Path) -> None:
    from alerting.clock import SimulatedClock
    from monitor.evaluation.rules import load_rules
    from monitor.pipeline import Pipeline
    from tests.monitor.recording_sink import RecordingSink as Recorder

    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {alert: Hot, severity: P2, select: temp, plot: true,\n"
                     "     detector: {type: threshold, op: '>', value: 1}}\n")
    clock, engine = SimulatedClock(T0), Recorder()
    pipe = Pipeline(load_rules(rules), clock, plots_dir=tmp_path / "plots", engine=engine)
    (tmp_path / "plots").mkdir()
    pipe.annotator.plot_links = PlotLinks(tmp_path / "plots", "http://127.0.0.1:9105/api/v1/plots", "s3cret")
    series = pipe.series("temp", {"node": "n1", "job": "x"})
    assert series is not None
    for v in (0.0, 0.0, 5.0):
        clock.advance(5)
        pipe.observe(series, clock.now(), v)
        pipe.tick()
    (hot,) = engine.submitted
    assert hot.annotations["plot"].startswith("http://127.0.0.1:9105/api/v1/plots/Hot-") and "sig=" in hot.annotations["plot"]
    assert Path(hot.plot_file).parent == tmp_path / "plots" and Path(hot.plot_file).read_bytes()[:4] == b"\x89PNG"
    assert "plotFile" not in hot.to_json()  # a local path never reaches a receiver's payload
    pipe.close()


@pytest.mark.slow
def test_the_daemon_signs_plot_links(tmp_path: Path) -> None:
    from monitor_http import RunningDaemon

    robot = WeComStandIn()
    (tmp_path / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "wecom", "type": "wecom", "url": robot.url}],
        "route": {"receiver": "wecom"}}))
    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "state_db": str(tmp_path / "state" / "state.db"), "bearer_token": "s3cret",
        "notify_config": "alerting.yaml", "reward_outliers": False, "targets": []}))
    d = RunningDaemon(tmp_path / "monitor.yaml")
    try:
        links = d.daemon.pipeline.annotator.plot_links  # the annotate stage signs the alerts' links
        plots = Path(d.daemon.config.plots_dir)
        plots.mkdir(parents=True, exist_ok=True)
        (plots / "p.png").write_bytes(PNG)
        url = links.url("p.png")
        assert url.startswith(f"{d.url}/api/v1/plots/p.png?exp=") and httpx.get(url).content == PNG
    finally:
        d.stop()
        robot.close()
