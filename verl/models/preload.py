"""What a rollout-worker forkserver imports once for a model. Torch-free, so ``verl-train`` can start the
forkserver before its own heavy imports and both import in parallel."""

from __future__ import annotations


def worker_preload(model: str) -> list[str]:
    """Torch and the model code, and transformers for an HF model directory (the tiny model does without
    it: the preload took 9.0-9.4 CPU-s with it, 3.9-4.2 without)."""
    return ["verl.rollout.worker_engine", *([] if model == "tiny" else ["verl.models.hf_loading"])]
