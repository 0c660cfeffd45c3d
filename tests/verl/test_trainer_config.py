"""Config schema, YAML + overrides, and the CLI's one-line exit-2 errors (``verl.cli.train.main`` in process:
the process boundary adds nothing to a config error; tests/verl/integration/test_it_hot_standby.py runs the
real process for its exit 2)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from verl.cli.train import main as train_main
from verl.config import TrainerConfigError, load_config


def test_bundled_configs_validate() -> None:
    tiny = load_config("ppo_tiny")
    assert tiny.actor.model == "tiny" and tiny.reward.path == "rule:lowercase"
    llama = load_config("ppo_llama3")
    assert llama.rollout.engine == "vllm" and llama.actor.device == "cuda" and llama.reward.device == "cuda:7"
    assert llama.data.num_workers == 8 and llama.data.persistent_workers and llama.data.pin_memory
    assert llama.algorithm.kl_penalty == "low_var_kl" and llama.checkpoint.interval == 500


def test_defaults_follow_the_article() -> None:
    cfg = load_config(None)
    assert cfg.rollout_buffer_max_size == 50000 and cfg.rollout_buffer_eviction_policy == "fifo"
    assert cfg.checkpoint.interval == 500 and cfg.reward.timeout_s == 30 and cfg.reward.failure_threshold == 3
    assert cfg.reward.cache_size == 1000 and cfg.data.cooldown_minutes == 30 and cfg.data.max_response_tokens == 512
    assert cfg.guard.variance_jump == 3.0 and cfg.guard.extreme_ratio == 0.05
    assert cfg.checkpoint.rollout_cache_shard_bytes == 2 * 1024**3
    assert cfg.faults.kill_rollout_worker_at_steps == [] and cfg.faults.kill_trainer_at_step is None


def test_dotted_overrides_are_typed() -> None:
    cfg = load_config("ppo_tiny", ["trainer.total_steps=40", "kl_coef=0.2", "checkpoint.interval=4",
                                   "faults.kill_rollout_worker_at_steps=[3, 5]", "data.response_schema=s.json",
                                   "actor.lr=1"])
    assert cfg.trainer.total_steps == 40 and cfg.kl_coef == 0.2 and cfg.checkpoint.interval == 4
    assert cfg.faults.kill_rollout_worker_at_steps == [3, 5] and cfg.data.response_schema == "s.json"
    assert isinstance(cfg.actor.lr, float)


@pytest.mark.parametrize(("overrides", "needle"), [
    (["trainer.totl_steps=3"], "unknown config key 'trainer.totl_steps'"),
    (["kl_coef=abc"], "config key 'kl_coef' must be float"),
    (["kl_coef=nan"], "config key 'kl_coef' must be a finite number"),
    (["trainer.total_steps=2.5"], "config key 'trainer.total_steps' must be int"),
    (["data.pin_memory=maybe"], "config key 'data.pin_memory' must be bool"),
    (["rollout_buffer_eviction_policy=lifo"], "rollout_buffer_eviction_policy"),
    (["rollout_buffer_max_size=0"], "rollout_buffer_max_size"),
    (["trainer=3"], "config key 'trainer' must be a section"),
    (["novalue"], "is not key=value"),
])
def test_bad_overrides_name_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(TrainerConfigError, match=None) as info:
        load_config("ppo_tiny", overrides)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_article_config_path_resolves_to_bundled_file() -> None:
    assert load_config("configs/ppo_llama3.yaml").actor.model.endswith("Meta-Llama-3-8B-Instruct")


def test_unknown_config_name() -> None:
    with pytest.raises(TrainerConfigError, match="ppo_tiny"):
        load_config("nope_not_here")


def _assert_one_line_exit2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    capsys.readouterr()
    rc = train_main(args)
    out = capsys.readouterr()
    assert rc == 2, out.err
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1, out.err
    assert needle in lines[0]


def test_cli_unknown_key_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    _assert_one_line_exit2(capsys, ["--config", "ppo_tiny", "actor.learning_rate=0.1"], "'actor.learning_rate'")


def test_cli_wrong_type_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("trainer:\n  total_steps: many\n")
    _assert_one_line_exit2(capsys, ["--config", str(cfg)], "'trainer.total_steps' must be int")


def test_cli_missing_dataset_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    _assert_one_line_exit2(capsys, ["--config", "ppo_tiny", f"data.prompt_dataset={missing}"], str(missing))


def test_cli_port_in_use_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        _assert_one_line_exit2(capsys, ["--config", "ppo_tiny", "--metrics-port", str(port)], f"port {port}")
