from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from alerting.config import AlertingConfigError, load_config, parse_config, parse_duration

BASE = {"receivers": [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/hook"}]}


def test_durations() -> None:
    assert parse_duration("30s", "k") == 30
    assert parse_duration("1h30m", "k") == 5400
    assert parse_duration(12, "k") == 12
    with pytest.raises(AlertingConfigError, match="route.group_wait"):
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
    with pytest.raises(AlertingConfigError) as info:
        parse_config(raw)
    msg = str(info.value)
    assert key in msg and "\n" not in msg


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(AlertingConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("receivers: [\n")
    with pytest.raises(AlertingConfigError, match="bad.yaml.*not valid YAML"):
        load_config(bad)


# -- hostile input (issue 13): one line naming the key, never a traceback or a hang -------------------

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))


@pytest.mark.parametrize(("extra", "needle"), [
    ({"routes": {"receiver": "ops"}}, "unknown key 'routes'; did you mean 'route'?"),
    ({"outbox": {"jitter": "abc"}}, "outbox.jitter: expected a number, got abc"),
    ({"outbox": {"jitter": float("nan")}}, "outbox.jitter: expected a finite number"),
    ({"outbox": {"jitter": 2}}, "outbox.jitter: must be <= 1"),
    ({"outbox": [1]}, "outbox: expected a mapping"),
    ({"outbox": {"backof_max": "5m"}}, "outbox.backof_max: unknown key; did you mean 'backoff_max'?"),
    ({"outbox": {"backoff_initial": "0s"}}, "outbox.backoff_initial: must be a duration > 0"),
    ({"outbox": {"backoff_initial": "10m", "backoff_max": "1m"}}, "outbox.backoff_max: 1m is shorter"),
    ({"outbox": {"seed": -1}}, "outbox.seed: must be >= 0"),
    ({"route": {"receiver": "ops", "group_interval": "0s"}}, "route.group_interval: must be a duration > 0"),
    ({"route": {"receiver": "ops", "repeat_interval": float("inf")}}, "route.repeat_interval: duration must be finite"),
    ({"route": {"receiver": "ops", "group_wait": [1]}}, "route.group_wait: expected a duration"),
    ({"route": {"receiver": "ops", "routes": [{"matcher": []}]}}, "route.routes[0].matcher: unknown key; did you mean 'matchers'?"),
    ({"inhibit_rules": {"a": 1}}, "inhibit_rules: expected a list"),
    ({"inhibit_rules": [{"equals": ["node"]}]}, "inhibit_rules[0].equals: unknown key; did you mean 'equal'?"),
    ({"correlation": {"include_default": False}}, "correlation.include_default: unknown key; did you mean 'include_defaults'?"),
    ({"correlation": {"include_defaults": "no"}}, "correlation.include_defaults: expected true or false"),
    ({"monitor_url": [1]}, "monitor_url: expected a URL string"),
])
def test_bad_values_name_the_key(extra: dict, needle: str) -> None:
    with pytest.raises(AlertingConfigError) as info:
        parse_config({**BASE, **extra})
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize(("receiver", "needle"), [
    ({"secret": ""}, "receivers[0].secret: empty"),
    ({"secret_env": "NO_SUCH_VAR_I13"}, "environment variable NO_SUCH_VAR_I13 is unset or empty"),
    ({"timeout": "0s"}, "receivers[0].timeout: must be a duration > 0"),
    ({"mention": ["1"]}, "receivers[0].mention: unknown key; did you mean 'mentions'?"),
])
def test_receiver_values(receiver: dict, needle: str) -> None:
    with pytest.raises(AlertingConfigError, match=None) as info:
        parse_config({"receivers": [{**BASE["receivers"][0], **receiver}]})
    assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize(("data", "needle"), [
    (BOMB.encode(), "line 2: not valid YAML (YAML alias *a is not allowed"),
    (b"receivers: [{name: caf\xe9}]\n", "line 1: not UTF-8 text (byte 0xe9"),
])
def test_hostile_files_exit_2_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes,
                                           needle: str) -> None:
    from alerting.cli import main as alert_main

    (tmp_path / "a.yaml").write_bytes(data)
    assert alert_main(["test", "--config", str(tmp_path / "a.yaml"), "--receiver", "ops"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize(("text", "needle"), [
    ("- name: X\n  all_of: [A]\n", "must be a mapping with a 'rules:' list"),
    ("rules: {name: X}\n", "must be a mapping with a 'rules:' list"),
    ("rule: []\n", "unknown key 'rule'; did you mean 'rules'?"),
    (BOMB, "YAML alias *a is not allowed"),
    ("rules: [{name: X, all_of: A}]\n", "rules[0].all_of: expected a list of names"),
    ("rules: [{name: X, any_of: [A], min_any: x}]\n", "rules[0].min_any: expected an integer"),
    ("rules: [{name: X, any_of: [A], min_any: 2}]\n", "rules[0].min_any: must be <= 1"),
    ("rules: [{name: X, all_of: [A], window: 0s}]\n", "rules[0].window: must be a duration > 0"),
    ("rules: [{name: X, all_of: [A], joins: [node]}]\n", "rules[0].joins: unknown key; did you mean 'join'?"),
])
def test_correlation_rules_file_shape(tmp_path: Path, text: str, needle: str) -> None:
    from alerting.correlate import load_rules

    (tmp_path / "rules.yaml").write_text(text)
    with pytest.raises(AlertingConfigError) as info:
        load_rules([tmp_path / "rules.yaml"])
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


_LEAF = st.none() | st.booleans() | st.integers(-5, 10**9) | st.floats() | st.text(max_size=8) | st.sampled_from(
    ["0s", "5m", "http://127.0.0.1:1/x", "ops", "webhook", 'severity="P0"'])
_KEYS = st.sampled_from(["receivers", "route", "outbox", "inhibit_rules", "correlation", "monitor_url", "name", "type",
                         "url", "receiver", "routes", "group_wait", "jitter", "seed", "matchers", "equal", "secret",
                         "timeout", "bogus"])
_DOC = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
                    max_leaves=12)


@seed(13)
@settings(max_examples=200, deadline=None, derandomize=True)
@given(doc=st.dictionaries(_KEYS, _DOC, max_size=5))
def test_fuzz_parse_config(doc: dict) -> None:
    try:
        parse_config({**BASE, **doc} if "receivers" not in doc else doc)
    except AlertingConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 500


def test_a_fifo_as_config_does_not_hang(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(AlertingConfigError, match="not a regular file"):
        load_config(tmp_path / "fifo.yaml")


@seed(13)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(argv=st.lists(st.sampled_from(["test", "render", "--config", "--receiver", "--alert", "--lang", "zh-CN",
                                      "/nonexistent.yaml", "ops", "-x", ""]), max_size=6))
def test_fuzz_verl_alert_argv(argv: list[str]) -> None:
    from alerting.cli import main as alert_main

    try:
        code = alert_main(argv)
    except SystemExit as exc:  # argparse usage error
        code = exc.code
    assert code == 2
