"""Sharded, asynchronous, validated checkpoints (``verl/checkpoint/README.md``)."""

import warnings

from .digest import digest_checkpoint, digest_models, digest_tensors
from .errors import CheckpointError
from .layout import latest_complete, list_steps, rotate
from .manager import CheckpointManager, SaveResult
from .restore import LoadedCheckpoint
from .rollout_cache import ROLLOUT_CACHE_VERSION
from .trainer_hook import TrainerCheckpointer, make_checkpointer
from .verify import FORMAT_VERSION, verify

# Single-process use is deliberate here (``no_dist=True``), yet DCP warns on every call without a
# process group; the filter matches only that message.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

__all__ = [
    "FORMAT_VERSION",
    "ROLLOUT_CACHE_VERSION",
    "CheckpointError",
    "CheckpointManager",
    "LoadedCheckpoint",
    "SaveResult",
    "TrainerCheckpointer",
    "digest_checkpoint",
    "digest_models",
    "digest_tensors",
    "latest_complete",
    "list_steps",
    "make_checkpointer",
    "rotate",
    "verify",
]
