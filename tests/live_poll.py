"""Polling a stack of real processes on loopback until a check holds: the HA pair's steps and the live
Alertmanager test wait the same way, each failing with the logs of its own stack."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

# a peer still starting or restarting: connection refused, a body not yet complete, a key not there yet
NOT_YET = (httpx.HTTPError, KeyError, ValueError, IndexError)


def poll(check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """``check()``'s first truthy result within ``timeout`` seconds, else None."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            got = check()
        except NOT_YET:
            got = None
        if got:
            return got
        time.sleep(every)
    return None
