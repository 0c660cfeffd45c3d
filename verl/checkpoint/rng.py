"""Every RNG stream a training step draws from, captured as JSON and restored exactly."""

from __future__ import annotations

import base64
import binascii
import random
from typing import Any

import numpy as np
import torch

from .shapes import RNG_SCHEMA, shape_error


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode()


def _tensor(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()


def capture() -> dict[str, Any]:
    """Python, NumPy (global), torch CPU and, when present, every CUDA device's state."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def check(state: Any) -> str | None:
    """What is wrong with a saved RNG state, as ``"<stream>: <problem>"``, or ``None``. Run before
    anything is restored: ``set_rng_state`` with a forged blob fails halfway, after other streams moved."""
    problem = shape_error(state, RNG_SCHEMA)
    if problem is not None:
        return problem
    blobs = {"torch": [state["torch"]], "cuda": list(state.get("cuda", []))}
    want = torch.get_rng_state().numel()
    for stream, values in blobs.items():
        for i, text in enumerate(values):
            try:
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                return f"{stream}: not base64"
            if stream == "torch" and len(raw) != want:
                return f"{stream}: {len(raw)} bytes, a torch CPU generator state is {want}"
            if stream == "cuda" and not raw:
                return f"cuda[{i}]: empty state"
    if state["python"][1][-1] > 624:
        return f"python: position {state['python'][1][-1]} is outside 0..624"
    return None


def restore(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_tensor(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(s) for s in state["cuda"]])
