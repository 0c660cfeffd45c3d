"""Rollout engines: prompts in, scored-later ``Rollout`` records out."""

from verl.rollout.base import RolloutEngine, make_rollout_engine
from verl.rollout.hf import HFRolloutEngine

__all__ = ["HFRolloutEngine", "RolloutEngine", "make_rollout_engine"]
