"""Issue 35: chat messages link the incident's page in the monitor console when its URL is known."""

from __future__ import annotations

from types import SimpleNamespace

from alerting.templates import render
from tests.alerting.test_templates import INCIDENT, note


def test_a_lone_incident_links_its_console_page_for_every_robot() -> None:
    url = f"http://mon:9105/alerts/{INCIDENT.fingerprint}"
    for dialect in ("wecom", "dingtalk", "feishu", "plain"):
        out = render([note(INCIDENT)], console="http://mon:9105/", dialect=dialect)
        assert out.text.splitlines()[-1] == f"Console: {url}", dialect
    two = render([note(INCIDENT, INCIDENT)], console="http://mon:9105")
    assert two.text.splitlines()[-1] == "Console: http://mon:9105/"  # several: the console's alert list
    assert render([note(INCIDENT)], console="http://mon:9105", lang="zh-CN").text.splitlines()[-1] == f"控制台: {url}"
    assert "Console" not in render([note(INCIDENT)]).text  # no URL known: no line


def test_the_monitors_external_url_becomes_the_engines_link_base(tmp_path) -> None:  # noqa: ANN001
    from alerting.clock import SimulatedClock
    from alerting.config import parse_config
    from alerting.engine import AlertEngine
    from monitor.book.alerting_stage import start

    cfg = parse_config({"receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}],
                        "route": {"receiver": "hook"}})
    pipeline = SimpleNamespace(set_base_url=lambda url: None, annotator=SimpleNamespace())
    config = SimpleNamespace(external_url="https://mon.example:9105/", plots_dir=None, bearer_token=None)
    engine = AlertEngine(cfg, tmp_path / "alerting.db", SimulatedClock(0.0))
    try:
        start(pipeline, engine, config, "http://127.0.0.1:9105")  # type: ignore[arg-type]
        assert engine.config.monitor_url == "https://mon.example:9105"
    finally:
        engine.close()
    engine = AlertEngine(cfg, tmp_path / "alerting.db", SimulatedClock(0.0))
    engine.config.monitor_url = "http://own"
    try:
        start(pipeline, engine, config, "http://127.0.0.1:9105")  # type: ignore[arg-type]
        assert engine.config.monitor_url == "http://own"  # the alerting config's own choice stays
    finally:
        engine.close()
