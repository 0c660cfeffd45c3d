"""Deterministic randomness keyed by *what* is being sampled, never by wall time or by which process
does the work: a rollout for (step, prompt) draws the same tokens on any rank, worker or resume."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any tuple of parts. Python's ``hash`` is salted per process, hence sha256."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator_for(*parts: object, device: str | torch.device = "cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*parts))
    return gen


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def deterministic_kernels() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its import of ``torch._inductor``,
    which the public call makes only to set Inductor's own flag: 0.35 CPU-s of every rank's start (measured
    with ``-X importtime``, torch 2.13), and this trainer never compiles a graph. Any torch without the
    private setter takes the public call."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        setter(True, warn_only=True)


def rng_state() -> dict[str, Any]:
    """Every global RNG state, for the checkpoint's meta-state."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
