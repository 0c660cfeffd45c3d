"""YAML file + dotted ``key=value`` overrides -> a typed ``Config``.

Written by hand rather than with OmegaConf/Hydra: the schema is plain dataclasses, the only needs are
"unknown key" and "wrong type" as one-line errors naming the key, and it saves a dependency.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Union

from verl.config.aliases import alias_key, apply_aliases
from verl.config.checks import CHOICES, RANGES
from verl.config.errors import TrainerConfigError
from verl.config.safe_yaml import did_you_mean, load_yaml_file, load_yaml_text, short
from verl.config.schema import Config

SECRETS = {"metrics.api_token", "metrics.api_token_env"}  # keys where null/"" is an error, not "off"
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "configs"


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
    raise TrainerConfigError(
        f"config '{name_or_path}' not found: give a YAML file path or one of {', '.join(bundled_names())}"
    )


def load_config(name_or_path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    raw: dict[str, Any] = {}
    if name_or_path is not None:
        path = resolve_config_path(str(name_or_path))
        try:
            loaded = load_yaml_file(path)
        except OSError as exc:
            raise TrainerConfigError(f"config {path}: cannot read ({exc.strerror}); check the --config path") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise TrainerConfigError(f"{path}: top level must be a mapping of sections and keys")
        raw = loaded or {}
    apply_aliases(raw)  # volcengine verl's spellings of shared keys (verl/config/aliases.py)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TrainerConfigError(f"override {short(item)!r} is not key=value (e.g. trainer.total_steps=40)")
        parsed = load_yaml_text(value, f"override {short(key.strip(), 60)}") if value.strip() else None
        _set_dotted(raw, alias_key(key.strip()), parsed)
    config = _build(Config, raw, prefix="")
    validate(config)
    return config


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise TrainerConfigError(f"override '{short(key, 60)}': '{short(part, 40)}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise TrainerConfigError(f"config key '{prefix.rstrip('.')}' must be a section (mapping), got {short(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            raise TrainerConfigError(f"unknown config key '{short(str(dotted), 80)}'; {did_you_mean(str(key), fields)}")
        if dotted in SECRETS and (value is None or isinstance(value, str) and not value.strip()):
            # leaving a token empty must not read as "authentication off": remove the key for that
            raise TrainerConfigError(f"config key '{dotted}' is empty; give a value, or remove the key")
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
            raise TrainerConfigError(f"config key '{key}' must be a list, got {short(value)}")
        return [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            with contextlib.suppress(OverflowError):  # a 400-digit int is not a float
                number = float(value)
        elif isinstance(value, str):
            # YAML 1.1 reads "1e9" (no dot) as a string; a user who wrote it meant the number
            with contextlib.suppress(ValueError):
                number = float(value)
        if number is not None and math.isfinite(number):
            return number
        if number is not None or isinstance(value, (int, float)) and not isinstance(value, bool):
            raise TrainerConfigError(f"config key '{key}' must be a finite number, got {short(value)}")
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - schema uses only the types above
        raise TrainerConfigError(f"config key '{key}' has an unsupported type {hint}")
    raise TrainerConfigError(f"config key '{key}' must be {hint.__name__}, got {short(value)}")


def get_dotted(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = getattr(node, part)
    return node


def validate(config: Config) -> None:
    """Value checks the type system cannot express: the ``checks.RANGES``/``CHOICES`` tables, then
    the few rules that relate two keys."""
    for key, choices in CHOICES.items():
        if get_dotted(config, key) not in choices:
            raise TrainerConfigError(f"config key '{key}' must be one of {', '.join(choices)}, got {short(get_dotted(config, key))}")
    for key, allowed in RANGES.items():
        value = get_dotted(config, key)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if item is not None and not allowed.admits(item):
                where = f"{key}[{i}]" if isinstance(value, list) else key
                raise TrainerConfigError(f"config key '{where}' must be {allowed.describe()}, got {short(item)}")
    if config.rollout_buffer_max_size == 0:
        raise TrainerConfigError("config key 'rollout_buffer_max_size' must be > 0, or -1 for unbounded")
    if config.data.persistent_workers and config.data.num_workers == 0:
        raise TrainerConfigError("config key 'data.persistent_workers' needs data.num_workers > 0")
    if config.metrics.api_token_env is not None:
        if config.metrics.api_token is not None:
            raise TrainerConfigError("config keys 'metrics.api_token' and 'metrics.api_token_env' are exclusive; keep one")
        env = config.metrics.api_token_env
        if not os.environ.get(env, "").strip():
            raise TrainerConfigError(f"config key 'metrics.api_token_env': environment variable {short(env, 60)} is unset "
                              "or empty; export the token")
        config.metrics.api_token = os.environ[env].strip()
    if config.metrics.api_token is not None and not config.metrics.api_token.strip():
        raise TrainerConfigError("config key 'metrics.api_token' is empty; give a token, or remove the key to leave "
                          "/api/v1/reward_outliers open")


def to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)
