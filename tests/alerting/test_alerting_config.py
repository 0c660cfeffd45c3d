from __future__ import annotations

from pathlib import Path

import pytest

from alerting.config import ConfigError, load_config, parse_config, parse_duration

BASE = {"receivers": [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/hook"}]}


def test_durations() -> None:
    assert parse_duration("30s", "k") == 30
    assert parse_duration("1h30m", "k") == 5400
    assert parse_duration(12, "k") == 12
    with pytest.raises(ConfigError, match="route.group_wait"):
        parse_duration("5 minutes", "route.group_wait")


def test_route_defaults_and_inheritance() -> None:
    cfg = parse_config({**BASE, "route": {"receiver": "ops", "group_wait": "10s",
                                          "routes": [{"matchers": ['severity="P0"'], "repeat_interval": "1h"}]}})
    root, child = cfg.route, cfg.route.routes[0]
    assert (root.group_wait_s, root.group_interval_s, root.repeat_interval_s) == (10, 300, 4 * 3600)
    assert root.group_by == ["alertname", "cluster", "node"]
    assert (child.receiver, child.group_wait_s, child.repeat_interval_s) == ("ops", 10, 3600)
    assert child.matchers[0].matches({"severity": "P0"}) and not child.matchers[0].matches({"severity": "P1"})


def test_env_expansion_and_secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DT_TOKEN", "tok123")
    monkeypatch.setenv("DT_SECRET", "SECabc")
    cfg = parse_config({"receivers": [{"name": "dt", "type": "dingtalk", "secret_env": "DT_SECRET",
                                       "url": "https://oapi.dingtalk.com/robot/send?access_token=${DT_TOKEN}"}]})
    rc = cfg.receivers["dt"]
    assert rc.url.endswith("access_token=tok123") and rc.secret == "SECabc"
    assert "tok123" not in repr(rc) and "SECabc" not in repr(rc)


@pytest.mark.parametrize(("raw", "key"), [
    ({"receivers": [{"name": "x", "type": "slack", "url": "http://a"}]}, "receivers[0].type"),
    ({"receivers": [{"name": "x", "type": "webhook"}]}, "receivers[0].url"),
    ({"receivers": [{"name": "x", "type": "webhook", "url": "http://a", "lang": "fr"}]}, "receivers[0].lang"),
    ({**BASE, "route": {"receiver": "nobody"}}, "route.receiver"),
    ({**BASE, "route": {"receiver": "ops", "routes": [{"matchers": ["severity=P0 extra"]}]}},
     "route.routes[0].matchers[0]"),
    ({**BASE, "inhibit_rules": [{"source_matchers": ['a=~"("']}]}, "inhibit_rules[0].source_matchers[0]"),
    ({"receivers": [{"name": "x", "type": "webhook", "url": "http://a/${NOPE_NOT_SET}"}]}, "NOPE_NOT_SET"),
])
def test_errors_name_the_key(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    msg = str(info.value)
    assert key in msg and "\n" not in msg


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("receivers: [\n")
    with pytest.raises(ConfigError, match="bad.yaml.*not valid YAML"):
        load_config(bad)
