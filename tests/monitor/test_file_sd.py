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
from monitor.errors import MonitorConfigError
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
    with pytest.raises(MonitorConfigError, match=r"file_sd\[0\]\.fiels: unknown key"):
        load([{"fiels": ["x.json"]}])
    with pytest.raises(MonitorConfigError, match=r"file_sd\[0\]\.files: expected a list"):
        load([{"files": []}])
    with pytest.raises(MonitorConfigError, match=r"file_sd\[0\]\.interval"):
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
    with pytest.raises(MonitorConfigError, match="give one of them"):
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


def test_a_file_over_its_target_limit_keeps_the_first_targets_and_counts_the_rest(tmp_path: Path) -> None:
    from monitor.sources import file_sd

    sd = tmp_path / "sd.json"
    targets = [f"10.0.{i // 250}.{i % 250}:9100" for i in range(3000)]
    sd.write_text(__import__("json").dumps([{"targets": targets[:2000]}, {"targets": targets[2000:]}]))
    src = FileSDSource(FileSDConfig((str(sd),), job="ray"), None)  # type: ignore[arg-type]
    gone, errors = src.refresh()
    assert list(src.targets) == targets[:file_sd.MAX_TARGETS_PER_FILE]
    batch = file_sd._error_batch(src.metric, errors)
    assert batch.errors == {"file_sd_target_limit": 3000 - file_sd.MAX_TARGETS_PER_FILE}
    assert "3000 targets, over target_limit 1000: the first 1000 are scraped" in batch.notes["file_sd_target_limit"]
    small = FileSDSource(FileSDConfig((str(sd),), job="ray", target_limit=10), None)  # type: ignore[arg-type]
    small.refresh()
    assert len(small.targets) == 10
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"file_sd": [{"files": [str(sd)], "target_limit": 0}]}))
    with pytest.raises(MonitorConfigError, match=r"file_sd\[0\]\.target_limit"):
        load_config(tmp_path / "m.yaml")


def test_a_slow_parse_runs_off_the_loop_and_its_result_is_taken_by_a_later_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from monitor.sources import file_sd

    real = file_sd.parse_groups

    def slow(*a: object, **kw: object) -> object:
        time.sleep(0.6)  # a 14.8 MB YAML file's parse, shortened
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(file_sd, "parse_groups", slow)
    monkeypatch.setattr(file_sd, "READ_DEADLINE_S", 0.1)
    sd = tmp_path / "sd.yaml"
    sd.write_text("- targets: ['10.0.0.1:9100']\n")
    src = FileSDSource(FileSDConfig((str(sd),), job="ray"), None)  # type: ignore[arg-type]

    async def go() -> tuple[float, int, list, list]:
        ticks = 0

        async def ticker() -> None:  # the rest of the daemon's loop: scrapes, evaluation
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        first = await src.refresh_off_loop()
        took = time.perf_counter() - t0
        n = ticks
        await asyncio.sleep(0.8)
        later = await src.refresh_off_loop()
        t.cancel()
        return took, n, list(first[1]), [list(src.targets), later]

    took, ticks, errors, (names, later) = asyncio.run(go())
    assert took < 0.4 and ticks >= 3  # the loop ran on while the file was parsed
    assert len(errors) == 1 and "still reading after 0.1s" in str(errors[0])
    assert names == ["10.0.0.1:9100"] and later == ([], [])


def test_a_yaml_file_too_large_to_parse_soon_is_refused_and_the_same_as_json_is_read(tmp_path: Path) -> None:
    from monitor.sources import file_sd

    groups = [{"targets": [f"10.0.{i // 250}.{i % 250}:9100"], "labels": {"n": "x" * 40}} for i in range(12000)]
    big = tmp_path / "sd.yaml"
    big.write_text(yaml.dump(groups, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))  # libyaml: 1.5 s less
    assert big.stat().st_size > file_sd.MAX_YAML_BYTES
    src = FileSDSource(FileSDConfig((str(big),), job="ray"), None)  # type: ignore[arg-type]
    _, errors = src.refresh()
    assert not src.targets and "a YAML file over 1 MiB" in str(errors[0]) and "write it as JSON" in str(errors[0])
    as_json = tmp_path / "sd.json"
    as_json.write_text(__import__("json").dumps(groups))
    src = FileSDSource(FileSDConfig((str(as_json),), job="ray"), None)  # type: ignore[arg-type]
    src.refresh()
    assert len(src.targets) == file_sd.MAX_TARGETS_PER_FILE
