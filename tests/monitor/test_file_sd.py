"""file_sd (issue 33): Prometheus' file_sd_configs format read as Prometheus reads it, the target set
following the file, a bad file counted and logged once with the old targets kept, the config checked."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml

from harness.deployment import Exposition, SimulatedDaemon, write_sd
from monitor.config import load_config
from monitor.errors import ConfigError
from monitor.sources.file_sd import FileSDConfig, FileSDError, FileSDSource, parse_groups
from monitor.sources.scrape_http import ScrapeClient

CFG = FileSDConfig(("x",), job="ray", interval=5.0, timeout=3.0)


def test_groups_json_and_yaml_with_prometheus_meta_labels() -> None:
    text = ('[{"targets": ["10.0.0.5:8080", "[::1]:9100"], "labels": {"job": "vllm", "team": "rl", '
            '"__metrics_path__": "/prom", "__scheme__": "https", "__param_format": "text"}}, {"targets": []}]')
    a, b = parse_groups(text, "sd.json", CFG)
    assert a.url == "https://10.0.0.5:8080/prom?format=text" and a.job == "vllm"
    assert dict(a.labels) == {"team": "rl"}  # __ labels used then dropped; job is the target's job
    assert b.url.startswith("https://[::1]:9100/") and b.name == "[::1]:9100/prom"
    (c,) = parse_groups("- targets: ['127.0.0.1:8265']\n", "sd.yml", CFG)
    assert c.url == "http://127.0.0.1:8265/metrics" and c.job == "ray" and c.name == "127.0.0.1:8265"
    assert parse_groups("", "empty.yaml", CFG) == []


@pytest.mark.parametrize("text, word", [
    ("{not json", "not valid JSON"),
    ('{"targets": ["a:1"]}', "expected a list"),
    ('[{"targets": ["http://a:1/metrics"]}]', "is not host:port"),
    ('[{"targets": ["a:1"], "labels": {"bad-name": "x"}}]', "labels must map"),
    ('[{"targets": ["a:1"], "labels": {"n": 3}}]', "labels must map"),
    ('[{"targets": "a:1"}]', "group 0"),
])
def test_bad_content_is_one_line_naming_the_file(text: str, word: str) -> None:
    with pytest.raises(FileSDError, match=word) as info:
        parse_groups(text, "/etc/sd/rollout.json", CFG)
    assert "/etc/sd/rollout.json" in str(info.value) and "\n" not in str(info.value)


def test_target_set_follows_the_file_and_a_bad_file_keeps_the_old_targets(tmp_path: Path) -> None:
    a, b = Exposition("x_total 1\n"), Exposition("y 2\n")
    sd = tmp_path / "sd.json"
    write_sd(sd, [{"targets": [a.address], "labels": {"rack": "r1"}}])
    src = FileSDSource(FileSDConfig((str(sd),), job="ray"), None)  # type: ignore[arg-type]

    async def poll() -> object:
        async with ScrapeClient() as client:
            src.client = client
            from alerting.clock import SimulatedClock
            return await src.poll(SimulatedClock(1000.0))

    try:
        got = asyncio.run(poll())
        (p,) = got.polled  # type: ignore[attr-defined]
        x = next(s for s in p.batch.samples if s.name == "x_total")
        assert x.labels["rack"] == "r1" and x.labels["job"] == "ray" and x.labels["instance"] == a.address
        write_sd(sd, [{"targets": [b.address], "labels": {"rack": "r1"}}])
        got = asyncio.run(poll())
        assert got.gone == [a.address] and [p.source for p in got.polled] == [b.address]  # type: ignore[attr-defined]
        sd.write_text('[{"targets": ["no-port"]}]')
        got = asyncio.run(poll())
        assert [p.source for p in got.polled][:1] == [b.address] and not got.gone  # type: ignore[attr-defined]
        errs = got.polled[-1].batch  # type: ignore[attr-defined]
        assert errs.errors == {"file_sd_invalid": 1} and "no-port" in errs.notes["file_sd_invalid"]
        assert got.up is False and src.read_errors == 1  # type: ignore[attr-defined]
        got = asyncio.run(poll())  # unchanged bad file: not read, not counted again
        assert src.read_errors == 1 and got.up is True  # type: ignore[attr-defined]
    finally:
        a.close()
        b.close()


def test_daemon_counts_a_bad_file_once_and_logs_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    srv = Exposition("verl_global_step 3\n")
    (tmp_path / "sd").mkdir()
    sd = tmp_path / "sd" / "sd.yaml"
    write_sd(sd, [{"targets": [srv.address]}])
    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(tmp_path / "sd" / "*.yaml")], "job": "verl"}]})
    try:
        mon.run(10)
        sd.write_text("- targets: [oops\n")
        with caplog.at_level(logging.WARNING, logger="monitor.daemon"):
            mon.run(30)
        lines = [r.getMessage() for r in caplog.records if "file_sd" in r.getMessage()]
        assert len(lines) == 1 and "sd.yaml" in lines[0] and "keeping the targets" in lines[0], lines
        metric = mon.daemon.metrics.scrape_errors.labels("file_sd:*.yaml", "file_sd_invalid")
        assert metric._value.get() == 1
        assert any(s.labels.get("instance") == srv.address for s in mon.daemon.pipeline.store)
        assert not mon.fired("TrainerDown")
    finally:
        mon.close()
        srv.close()


def test_config_keys_are_checked(tmp_path: Path) -> None:
    def load(section: object) -> object:
        (tmp_path / "m.yaml").write_text(yaml.safe_dump({"file_sd": section}))
        return load_config(tmp_path / "m.yaml")

    cfg = load([{"files": ["/tmp/ray/prom_metrics_service_discovery.json"], "job": "ray", "refresh_interval": "1m"}])
    assert cfg.file_sd[0].refresh_interval == 60 and cfg.file_sd[0].job == "ray"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"file_sd\[0\]\.fiels: unknown key"):
        load([{"fiels": ["x.json"]}])
    with pytest.raises(ConfigError, match=r"file_sd\[0\]\.files: expected a list"):
        load([{"files": []}])
    with pytest.raises(ConfigError, match=r"file_sd\[0\]\.interval"):
        load([{"files": ["x.json"], "interval": 0}])


def test_the_ray_example_config_loads() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "monitor/examples/ray-cluster.yaml")
    assert cfg.file_sd[0].files == ("/tmp/ray/prom_metrics_service_discovery.json",)
    assert cfg.ray is not None and cfg.ray.dashboard_url == "http://127.0.0.1:8265"


@pytest.mark.parametrize("section", ["sd.json", ["a.json", "b.json"], {"files": "sd.json"}, ["sd.json"]])
def test_short_forms_of_the_section(tmp_path: Path, section: object) -> None:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"file_sd": section}))
    (cfg,) = load_config(tmp_path / "m.yaml").file_sd
    assert cfg.files and cfg.job == "file_sd" and cfg.interval == 5.0


def test_prometheus_spelling_of_the_section(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"file_sd_configs": [{"files": ["sd.json"], "job": "vllm"}]}))
    (cfg,) = load_config(tmp_path / "m.yaml").file_sd
    assert cfg.files == (str(tmp_path / "sd.json"),) and cfg.job == "vllm"  # relative to the config file
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"file_sd_configs": ["a.json"], "file_sd": ["b.json"]}))
    with pytest.raises(ConfigError, match="give one of them"):
        load_config(tmp_path / "m.yaml")


def test_a_yaml_alias_bomb_is_refused_not_expanded() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    with pytest.raises(FileSDError, match="sd.yaml"):
        parse_groups(bomb, "sd.yaml", CFG)


def test_json_nested_too_deep_is_one_error() -> None:
    with pytest.raises(FileSDError, match="not valid JSON"):
        parse_groups("[" * 100000 + "]" * 100000, "sd.json", CFG)


def test_a_file_not_there_yet_is_no_targets_and_no_error(tmp_path: Path) -> None:
    srv = Exposition("y 1\n")
    sd = tmp_path / "prom_metrics_service_discovery.json"
    src = FileSDSource(FileSDConfig((str(sd),), job="ray"), None)  # type: ignore[arg-type]
    try:
        assert src.refresh() == ([], []) and not src.targets
        write_sd(sd, [{"targets": [srv.address], "labels": {"job": "ray"}}])  # Ray started
        assert src.refresh() == ([], []) and list(src.targets) == [srv.address]
        sd.unlink()
        assert src.refresh() == ([srv.address], [])
    finally:
        srv.close()
