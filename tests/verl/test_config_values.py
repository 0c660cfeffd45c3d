"""The trainer config refuses hostile files and values with one line: aliases, non-UTF-8, NaN, ranges,
typos; and the trainer's API token guards /api/v1/reward_outliers."""

from __future__ import annotations

import dataclasses
import json
import time
import typing
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from verl.cli.train import build_parser
from verl.cli.train import main as train_main
from verl.config import TrainerConfigError, load_config
from verl.config.checks import RANGES
from verl.config.schema import Config
from verl.metrics.server import MetricsServer

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))


def _numeric_keys(cls: type = Config, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out += _numeric_keys(hint, f"{prefix}{f.name}.")
        elif {int, float} & set(typing.get_args(hint) or (hint,)) | (
                {int, float} & set(typing.get_args(typing.get_args(hint)[0]) if typing.get_origin(hint) is list else [])):
            out.append(f"{prefix}{f.name}")
    return out


def test_every_numeric_key_has_a_range_row() -> None:
    """A key added without its row in verl/config/checks.py:RANGES would go unchecked."""
    numeric = set(_numeric_keys())
    assert numeric - set(RANGES) == set(), "add these keys to verl/config/checks.py RANGES"
    assert set(RANGES) - numeric == set(), "RANGES names keys the schema does not have"


@pytest.mark.parametrize(("override", "needle"), [
    ("trainer.log_interval=0", "'trainer.log_interval' must be >= 1, got 0"),
    ("checkpoint.keep_last=0", "'checkpoint.keep_last' must be >= 1, got 0"),
    ("actor.lr=-1", "'actor.lr' must be > 0, got -1.0"),
    ("metrics.port=-5", "'metrics.port' must be >= 0 and <= 65535, got -5"),
    ("metrics.port=70000", "'metrics.port' must be >= 0 and <= 65535"),
    ("kl_coef=.nan", "'kl_coef' must be a finite number, got nan"),
    ("kl_coef=.inf", "'kl_coef' must be a finite number"),
    ("kl_coef=1e999", "'kl_coef' must be a finite number"),
    ("kl_coef=" + "9" * 400, "'kl_coef' must be a finite number"),
    ("algorithm.gamma=1.5", "'algorithm.gamma' must be >= 0 and <= 1"),
    ("faults.kill_rollout_worker_at_steps=[3, -1]", "'faults.kill_rollout_worker_at_steps[1]' must be >= 0"),
    ("guard.extreme_ratio=0", "'guard.extreme_ratio' must be > 0 and <= 1"),
    ("trainer.totl_steps=3", "unknown config key 'trainer.totl_steps'; did you mean 'total_steps'?"),
    ("klcoef=0.1", "did you mean 'kl_coef'?"),
    ("metrics.api_token=", "'metrics.api_token' is empty"),
    ("metrics.api_token=''", "'metrics.api_token' is empty"),
    ("metrics.api_token_env=NO_SUCH_VAR_I13", "environment variable NO_SUCH_VAR_I13 is unset or empty"),
    ("data.prompt_key=" + "x" * 5000 + ": [", "not valid YAML"),
    ("kl_coef=[*a]", "not valid YAML"),
    ("trainer.experiment_name=" + "&a [1, *a]", "not valid YAML"),
])
def test_bad_values_are_one_line_naming_the_key(override: str, needle: str) -> None:
    with pytest.raises(TrainerConfigError) as info:
        load_config("ppo_tiny", [override])
    text = str(info.value)
    assert needle in text and "\n" not in text and len(text) < 300, text


def test_long_values_are_quoted_short() -> None:
    with pytest.raises(TrainerConfigError) as info:
        load_config("ppo_tiny", ["rollout.engine=" + "z" * 10000])
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(("name", "data", "needle"), [
    ("bomb.yaml", BOMB.encode(), "YAML alias *a is not allowed"),
    ("latin1.yaml", b"trainer:\n  experiment_name: caf\xe9\n", "line 2: not UTF-8 text (byte 0xe9"),
    ("deep.yaml", b"a: " + b"[" * 5000, "nested too deep"),
    ("merge.yaml", b"base: &b {lr: 1}\nactor:\n  <<: *b\n", "alias *b is not allowed"),
    ("python.yaml", b"actor: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ("list.yaml", b"- 1\n- 2\n", "top level must be a mapping"),
    ("bigint.yaml", b"kl_coef: " + b"1" * 5000 + b"\n", "invalid YAML value"),
])
def test_hostile_files_fail_fast_with_one_line(tmp_path: Path, name: str, data: bytes, needle: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    t0 = time.process_time()  # CPU, not wall time: neighbours on a shared core do not count
    with pytest.raises(TrainerConfigError) as info:
        load_config(str(path))
    assert time.process_time() - t0 < 5  # expansion would take hours
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_cli_bomb_and_non_utf8_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, data in (("bomb.yaml", BOMB.encode()), ("latin1.yaml", b"kl_coef: 0.1 # caf\xe9\n")):
        (tmp_path / name).write_bytes(data)
        capsys.readouterr()
        assert train_main(["--config", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(tmp_path / name) in err and "Traceback" not in err


def test_api_token_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("I13_TRAINER_TOKEN", " s3cret ")
    cfg = load_config("ppo_tiny", ["metrics.api_token_env=I13_TRAINER_TOKEN"])
    assert cfg.metrics.api_token == "s3cret"
    with pytest.raises(TrainerConfigError, match="exclusive"):
        load_config("ppo_tiny", ["metrics.api_token_env=I13_TRAINER_TOKEN", "metrics.api_token=x"])


def test_trainer_api_requires_the_token_when_set() -> None:
    server = MetricsServer(CollectorRegistry(), "127.0.0.1", 0, lambda: {"status": "ok"},
                           lambda k: [{"prompt": "p", "reward": 9.0}], api_token="s3cret")
    base = f"http://127.0.0.1:{server.port}"

    def get(path: str, token: str | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        assert get("/api/v1/reward_outliers")[0] == 401
        assert get("/api/v1/reward_outliers", "wrong")[0] == 401
        code, body = get("/api/v1/reward_outliers?k=1", "s3cret")
        assert code == 200 and json.loads(body)["outliers"][0]["prompt"] == "p"
        assert get("/metrics")[0] == 200 and get("/healthz")[0] == 200  # scrapers need no token
    finally:
        server.close()


# -- fuzz: overrides and argv never escape the one-line error path -------------------------------------

_KEYS = st.sampled_from(sorted(RANGES) + ["rollout.engine", "trainer", "metrics.api_token", "nope.x", "a..b", ""])
_VALUES = st.one_of(st.text(max_size=20), st.sampled_from(
    [".nan", "-.inf", "1e400", "[1, 2]", "{a: 1}", "&a [*a]", "*x", "!!python/name:os.system", "0", "-1", "true",
     "null", "'", "\x00", "2001-13-01"]))


@seed(13)
@settings(max_examples=150, deadline=None, derandomize=True)
@given(key=_KEYS, value=_VALUES)
def test_fuzz_overrides(key: str, value: str) -> None:
    try:
        load_config("ppo_tiny", [f"{key}={value}"])
    except TrainerConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400


@seed(13)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(argv=st.lists(st.sampled_from(["--resume", "--resume-or-start", "--metrics-port", "-5", "99999", "x",
                                      "--config", "nope.yaml", "--checkpoint-dir", "kl_coef=nan", "=", "--bogus"]),
                     max_size=5))
def test_fuzz_cli_argv_parses_or_exits_2(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's own usage error
        assert exc.code == 2


def test_every_bad_input_error_is_a_config_error() -> None:
    """One base: verl-train reports each as one line with exit code 2, whichever component raised it."""
    from verl.checkpoint.lock import DirectoryLocked
    from verl.checkpoint.trainer_hook import FinalSaveFailed, ResumeError
    from verl.config import TrainerConfigError, load_config
    from verl.config.aliases import apply_aliases
    from verl.data.reward_guard import RewardGuard
    from verl.metrics.server import PortInUseError

    for error in (DirectoryLocked, ResumeError, FinalSaveFailed, PortInUseError):
        assert issubclass(error, TrainerConfigError), error
    with pytest.raises(TrainerConfigError, match="guard.variance_jump"):  # raised by the guard itself, not re-wrapped
        RewardGuard(variance_jump=0.5)
    with pytest.raises(TrainerConfigError, match="disagree"):  # an alias conflict, straight from the alias table
        apply_aliases({"data": {"train_batch_size": 8, "batch_size": 16}})
    with pytest.raises(TrainerConfigError, match="not valid YAML"):  # a YAML error, straight from the safe loader
        load_config("ppo_tiny", ["trainer.total_steps=[1"])
