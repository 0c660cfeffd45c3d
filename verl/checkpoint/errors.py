"""The one exception type a resume or a verification raises."""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint cannot be used. The message is one line naming the part and, where known, the fix,
    e.g. ``Rollout cache version mismatch: expected v2.1, got v2.0`` or
    ``checksum mismatch in global_step_8/actor/__0_0.distcp``."""


def one_line(exc: BaseException) -> str:
    """DCP wraps per-rank failures in ``CheckpointException`` (a BaseException) whose text starts with
    the rank list; the operator needs the underlying cause."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        exc = next(iter(failures.values()))
        if isinstance(exc, tuple) and exc and isinstance(exc[0], BaseException):
            exc = exc[0]  # torch 2.13: (exception, traceback frames) per rank
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]
