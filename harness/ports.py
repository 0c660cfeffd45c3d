"""Loopback ports for the processes tests and benchmarks start: one place, outside the kernel's ephemeral range.

A port the kernel hands out for ``bind(0)`` comes from ``ip_local_port_range`` -- the same range every
outgoing connection's source port comes from. Between our closing the probe socket and the child binding
the port, any of the suite's thousands of loopback connections may take it: CI saw Prometheus exit with
"bind: address already in use" on such a port. Ports below that range are only ever taken by an explicit
bind, so here they are drawn at random below it, each xdist worker from its own residue class (no two
workers can draw the same port), never the same one twice in a process, and checked free by binding.
"""

from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Iterable
from pathlib import Path

_LOWEST = 10000  # below this sit well-known and registered services' ports
_STRIDE = 16  # residue classes: up to 16 xdist workers never draw the same port
_given: set[int] = set()


def _ceiling() -> int:
    """The first ephemeral port (Linux's default 32768 where the range cannot be read)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > _LOWEST + 1000 else 32768


def _worker_index() -> int:
    found = re.search(r"(\d+)$", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(found.group(1)) % _STRIDE if found else _STRIDE - 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that was free a moment ago and that no outgoing connection will take meanwhile."""
    start = _LOWEST + (_worker_index() - _LOWEST) % _STRIDE
    candidates = [p for p in range(start, _ceiling(), _STRIDE) if p not in _given]
    random.shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise OSError(f"no free port below {_ceiling()} on {host} after 200 tries")


def free_ports(names: Iterable[str], host: str = "127.0.0.1") -> dict[str, int]:
    return {name: free_port(host) for name in names}
