"""Trainer configuration: dataclass schema, YAML + dotted overrides, one-line errors."""

from verl.config.errors import TrainerConfigError, TrainingStopped
from verl.config.loader import load_config, resolve_config_path, to_dict
from verl.config.schema import Config

__all__ = ["Config", "TrainerConfigError", "TrainingStopped", "load_config", "resolve_config_path", "to_dict"]
