"""Prompt data and the rollout buffer."""

from verl.data.buffer import Rollout, RolloutBuffer
from verl.data.loader import PromptDataset, PromptItem, RLDataLoader

__all__ = ["PromptDataset", "PromptItem", "RLDataLoader", "Rollout", "RolloutBuffer"]
