"""YAML file + dotted ``key=value`` overrides -> a typed ``Config``.

Written by hand rather than with OmegaConf/Hydra: the schema is plain dataclasses, the only needs are
"unknown key" and "wrong type" as one-line errors naming the key, and it saves a dependency.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml

from verl.config.aliases import AliasConflict, alias_key, apply_aliases
from verl.config.schema import Config

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "configs"


class ConfigError(ValueError):
    """Bad configuration; the message is one line naming the key or file and the fix."""


class TrainingStopped(RuntimeError):
    """Training cannot go on (e.g. out of memory again in degraded mode) and stopped after writing a
    checkpoint; ``verl-train`` prints the one-line message and exits with code 3. Declared here, beside
    ConfigError, so the CLI can catch it without importing the trainer."""


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def resolve_config_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.is_file():
        return path
    bundled = BUNDLED_DIR / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    # The article writes config="configs/ppo_llama3.yaml": accept a bundled file named by its path too.
    if path.suffix in (".yaml", ".yml") and (BUNDLED_DIR / path.name).is_file():
        return BUNDLED_DIR / path.name
    raise ConfigError(
        f"config '{name_or_path}' not found: give a YAML file path or one of {', '.join(bundled_names())}"
    )


def load_config(name_or_path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    raw: dict[str, Any] = {}
    if name_or_path is not None:
        path = resolve_config_path(str(name_or_path))
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{path}{where}: not valid YAML; fix the syntax") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections and keys")
        raw = loaded or {}
    try:
        apply_aliases(raw)  # volcengine verl's spellings of shared keys (verl/config/aliases.py)
    except AliasConflict as exc:
        raise ConfigError(str(exc)) from None
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override '{item}' is not key=value (e.g. trainer.total_steps=40)")
        _set_dotted(raw, alias_key(key.strip()), yaml.safe_load(value) if value.strip() else None)
    config = _build(Config, raw, prefix="")
    validate(config)
    return config


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"config key '{prefix.rstrip('.')}' must be a section (mapping), got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key '{dotted}'; known keys here: {known}")
        kwargs[key] = _coerce(hints[key], value, dotted)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, prefix=f"{key}.")
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        return [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads "1e9" (no dot) as a string; a user who wrote it meant the number
            with contextlib.suppress(ValueError):
                if (number := float(value)) == number:  # but not "nan"
                    return number
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - schema uses only the types above
        raise ConfigError(f"config key '{key}' has an unsupported type {hint}")
    raise ConfigError(f"config key '{key}' must be {hint.__name__}, got {value!r}")


_CHOICES = {
    "rollout_buffer_eviction_policy": ("fifo", "priority"),
    "algorithm.kl_penalty": ("kl", "abs", "mse", "low_var_kl"),
    "algorithm.kl_ctrl": ("fixed", "adaptive"),
    "rollout.engine": ("hf", "vllm"),
    "trainer.dist_backend": ("auto", "gloo", "nccl"),
}


def get_dotted(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def validate(config: Config) -> None:
    """Value checks the type system cannot express."""
    for key, choices in _CHOICES.items():
        if get_dotted(config, key) not in choices:
            raise ConfigError(f"config key '{key}' must be one of {', '.join(choices)}, got {get_dotted(config, key)!r}")
    positive = ("trainer.total_steps", "data.batch_size", "actor.ppo_mini_batch_size", "actor.ppo_epochs",
                "actor.micro_batches", "critic.micro_batches", "rollout.response_length", "reward_batch_size",
                "metrics.data_interval_steps", "rollout.worker_chunk_size", "faults.critic_oom_repeat",
                "data.max_response_tokens")
    for key in positive:
        if get_dotted(config, key) < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {get_dotted(config, key)}")
    for key in ("rollout_worker_num", "rollout.prefetch_batches", "rollout.oom_backoff_steps", "faults.checkpoint_write_delay_s",
                "faults.reward_hang_seconds"):
        if get_dotted(config, key) < 0:
            raise ConfigError(f"config key '{key}' must be >= 0, got {get_dotted(config, key)}")
    if config.data.guard_step_seconds <= 0:
        raise ConfigError("config key 'data.guard_step_seconds' must be > 0")
    if config.rollout_buffer_max_size == 0 or config.rollout_buffer_max_size < -1:
        raise ConfigError("config key 'rollout_buffer_max_size' must be > 0, or -1 for unbounded")
    if config.kl_coef < 0:
        raise ConfigError(f"config key 'kl_coef' must be >= 0, got {config.kl_coef}")
    if config.rollout.temperature <= 0:
        raise ConfigError("config key 'rollout.temperature' must be > 0")
    if config.data.persistent_workers and config.data.num_workers == 0:
        raise ConfigError("config key 'data.persistent_workers' needs data.num_workers > 0")
    if not 0 < config.faults.throughput_drop_factor <= 1:
        raise ConfigError("config key 'faults.throughput_drop_factor' must be in (0, 1]")


def to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)
