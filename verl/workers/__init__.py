"""Supervised rollout worker processes (a crashed worker loses no prompt)."""

from .pool import RolloutResult, RolloutTask, RolloutWorkerPool, start_worker_server
from .worker import seed_everything

__all__ = ["RolloutResult", "RolloutTask", "RolloutWorkerPool", "seed_everything", "start_worker_server"]
