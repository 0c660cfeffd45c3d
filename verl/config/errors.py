"""verl's two exits for bad input and for a run that cannot go on. Every error that means "the input is
wrong" derives from ``TrainerConfigError``, so ``verl-train`` reports each the same way: one line naming the key,
file or port and the fix, exit code 2, no traceback."""

from __future__ import annotations


class TrainerConfigError(ValueError):
    """Bad configuration or input; the message is one line naming the key or file and the fix."""


class TrainingStopped(RuntimeError):
    """Training cannot go on (e.g. out of memory again in degraded mode) and stopped after writing a
    checkpoint; ``verl-train`` prints the one-line message and exits with code 3. Declared beside
    TrainerConfigError, so the CLI can catch it without importing the trainer."""
