"""Rollout engines: prompts in, scored-later ``Rollout`` records out."""

from verl.rollout.base import Reconciled, RolloutEngine, make_rollout_engine, reconcile
from verl.rollout.hf import HFRolloutEngine

__all__ = ["HFRolloutEngine", "Reconciled", "RolloutEngine", "make_rollout_engine", "reconcile"]
