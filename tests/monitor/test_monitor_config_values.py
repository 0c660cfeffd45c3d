"""``verl-monitor run`` config: hostile files and values are one line naming the key, exit 2, at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from monitor.cli import main as monitor_main
from monitor.config import SECTION_KEYS, TOP_KEYS, MonitorConfigError, load_config

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
BASE = "listen: 127.0.0.1:0\n"


def write(tmp_path: Path, text: str | bytes, name: str = "monitor.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize(("text", "needle"), [
    ("eval_interval: 0", "eval_interval: must be a duration > 0"),
    ("eval_interval: -1s", "eval_interval: expected a duration"),
    ("eval_interval: .nan", "eval_interval: must be a duration > 0"),
    ("eval_interval: .inf", "eval_interval: must be a duration > 0"),
    ("prometheus: {url: 'http://127.0.0.1:9', step: 0}", "prometheus.step: must be a duration > 0"),
    ("prometheus: {url: 'http://127.0.0.1:9', step: 1ms}", "prometheus.step: 1ms over a chunk of 3600s is more than"),
    ("prometheus: {url: 'http://127.0.0.1:9', stepp: 5s}", "prometheus.stepp: unknown key; did you mean 'step'?"),
    ("bearer_token: ''", "bearer_token: empty or not a string"),
    ("bearer_token: 5", "bearer_token: empty or not a string"),
    ("bearer_token_env: NO_SUCH_VAR_I13", "bearer_token_env: environment variable NO_SUCH_VAR_I13 is unset or empty"),
    ("target: []", "unknown key 'target'; did you mean 'targets'?"),
    ("targets: [{url: 'http://h:1/metrics', intervall: 5s}]", "targets[0].intervall: unknown key; did you mean 'interval'?"),
    ("targets: [{url: 'http://h:1/metrics', interval: 0}]", "targets[0].interval: must be a duration > 0"),
    ("targets: [{url: 'http://h:1/metrics', api_token: ''}]", "targets[0].api_token: empty"),
    ("targets: {url: x}", "targets: expected a list"),
    ("targets: [5]", "targets[0]: expected a mapping"),
    ("nvml: {enabled: yes please}", "nvml.enabled: expected true or false"),
    ("nvml: {interval: 0}", "nvml.interval: must be a duration > 0"),
    ("limits: {capacity: 0}", "limits.capacity: must be >= 2"),
    ("limits: {max_series: .nan}", "limits.max_series: expected an integer"),
    ("limits: {max_series: 10, stale: 5m}", "limits.stale: unknown key; did you mean 'stale_after'?"),
    ("limits: [1]", "limits: expected a mapping"),
    ("listen: '127.0.0.1:99999'", "listen: expected host:port"),
    ("listen: [1]", "listen: expected host:port"),
    ("jsonl: [{path: a.jsonl, nod: x}]", "jsonl[0].nod: unknown key; did you mean 'node'?"),
    ("reward_outliers: 'no'", "reward_outliers: expected true or false"),
    ("cluster: " + "x" * 5000 + "\neval_interval: " + "y" * 5000, "eval_interval: expected a duration"),
])
def test_bad_values_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(MonitorConfigError) as info:
        load_config(write(tmp_path, BASE + text + "\n"))
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and len(msg) < 400, msg


@pytest.mark.parametrize(("data", "needle"), [
    (BOMB.encode(), "YAML alias *a is not allowed"),
    (b"cluster: caf\xe9\n", "line 1: not UTF-8 text (byte 0xe9"),
    (b"\xff\xfe" + "cluster: x\n".encode("utf-16-le"), "not UTF-8 text"),
    (b"cluster: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
])
def test_hostile_files_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes,
                                            needle: str) -> None:
    path = write(tmp_path, data)
    t0 = time.perf_counter()
    assert monitor_main(["run", "--config", str(path)]) == 2
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, err


def test_a_bomb_in_a_rules_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path, BOMB, "rules.yaml")
    from monitor.evaluation.rules import RuleError, load_rules

    with pytest.raises(RuleError, match=r"rules file .*rules\.yaml line 2: not valid YAML \(YAML alias"):
        load_rules(tmp_path / "rules.yaml")


def test_target_token_is_kept_per_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("I13_TRAINER_TOKEN", "t0k")
    cfg = load_config(write(tmp_path, BASE + "targets: [{name: trainer, url: 'http://h:1/metrics', "
                                             "api_token_env: I13_TRAINER_TOKEN}, {url: 'http://h:2/metrics'}]\n"))
    assert cfg.target_tokens == {"trainer": "t0k"}
    assert "t0k" not in repr(cfg)


# -- fuzz: any YAML document is a config or one MonitorConfigError line ---------------------------------------

_SCALARS = st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats() | st.text(max_size=10) | st.sampled_from(
    ["0", "5s", "-1s", "1ms", "http://127.0.0.1:1/metrics", "127.0.0.1:0", ""])
_DOC = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(sorted(TOP_KEYS | set().union(*SECTION_KEYS.values()) | {"bogus"})), inner, max_size=4),
    max_leaves=10)


@seed(13)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(st.sampled_from(sorted(TOP_KEYS - {"rules", "notify_config"})), _DOC, max_size=4))
def test_fuzz_config_documents(tmp_path: Path, doc: dict) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        load_config(path)
    except MonitorConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 500


def test_a_fifo_as_config_does_not_hang(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(MonitorConfigError, match="not a regular file"):
        load_config(tmp_path / "fifo.yaml")


def test_reward_outliers_are_fetched_with_the_targets_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's /api/v1/reward_outliers may require metrics.api_token; the monitor sends the target's."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    from alerting.clock import SimulatedClock
    from monitor.book import alerting_stage
    from monitor.sources.base import Round, TopPrompts
    from monitor.sources.reward_outliers import RewardOutlierSource

    seen: list[str] = []

    class Trainer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            ok = self.headers.get("Authorization") == "Bearer t0k"
            body = json.dumps({"outliers": [{"prompt": "p1", "reward": 9.5}]} if ok else {"error": "401"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trainer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("I13_TRAINER_TOKEN", "t0k")
        cfg = load_config(write(tmp_path, BASE + f"targets: [{{name: trainer, url: 'http://127.0.0.1:{server.server_address[1]}"
                                                 "/metrics', api_token_env: I13_TRAINER_TOKEN}]\n"))
        outliers = alerting_stage.reward_outliers(cfg)  # the value the annotate stage reads
        assert outliers is not None
        daemon = SimpleNamespace(config=cfg, _outliers=outliers.lines)

        async def fetch() -> Round:  # the outliers source reads; the evaluation tick only reads its records
            import httpx

            async with httpx.AsyncClient() as client:
                return await RewardOutlierSource(cfg.targets, cfg.target_tokens, client).poll(SimulatedClock(5.0))

        import asyncio

        (prompts,) = asyncio.run(fetch()).top_prompts
        assert prompts == TopPrompts("trainer", None, ("9.5: p1",), 5.0)
        daemon._outliers[prompts.target] = list(prompts.lines)  # what the daemon files from the round
        assert seen == ["Bearer t0k"] and outliers.for_node("any-node") == ["9.5: p1"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_nodes_reward_outliers_come_from_its_own_target_else_one_without_a_node() -> None:
    from monitor.book.annotate import RewardOutliers

    outliers = RewardOutliers([("a", "n1"), ("b", None)], {"a": ["pa"], "b": ["pb"]})
    assert outliers.for_node("n1") == ["pa"] and outliers.for_node("n2") == ["pb"]
    outliers.lines["a"] = []  # its own trainer had none this round
    assert outliers.for_node("n1") == ["pb"] and RewardOutliers().for_node("n1") == []
