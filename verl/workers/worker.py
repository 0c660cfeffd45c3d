"""The rollout worker process: receive a generate function, then tasks; answer each task once.

Protocol on the worker's own pipe (one per incarnation, so a worker killed mid-message can corrupt
nothing but its own, already dead, channel):

    parent -> worker   ("fn", generate_fn) | ("task", task_id, prompt, seed) | None (stop)
    worker -> parent   ("ok", task_id, output) | ("error", task_id, "ExcType: message")

The reply to a task is its acknowledgement: until it arrives the parent counts the task in flight
and re-queues it if the worker dies.
"""

from __future__ import annotations

import random
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

GenerateFn = Callable[[Any, int], Any]


def seed_everything(seed: int) -> None:
    """Seed every global RNG from the task's seed, so a result never depends on what the worker ran
    before (or on which worker ran it). NumPy and torch are seeded only when already imported (the
    generate function's module imports what it uses): importing torch just to seed it would add
    seconds to every worker restart."""
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def worker_main(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    fn: GenerateFn | None = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # parent went away
        if msg is None:
            return
        if msg[0] == "fn":
            fn = msg[1]
            continue
        _, task_id, prompt, seed = msg
        try:
            if fn is None:
                raise RuntimeError("no generate function was sent to the worker")
            seed_everything(seed)
            reply = ("ok", task_id, fn(prompt, seed))
        except Exception as exc:  # noqa: BLE001 - the parent turns it into this prompt's one result
            reply = ("error", task_id, f"{type(exc).__name__}: {exc}".splitlines()[0])
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return
