"""harness/ports.py: the ports tests and benchmarks give their children are never ephemeral ones (an
outgoing connection's source port could take such a port before the child binds it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from harness import ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:
        return 32768


def test_ports_lie_below_the_ephemeral_range_in_the_workers_own_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    got = [ports.free_port() for _ in range(50)]
    assert all(10000 <= p < _ephemeral_low() for p in got), got
    assert {p % 16 for p in got} == {3}  # gw3 never draws gw0's, gw1's or gw2's ports
    assert len(set(got)) == len(got)  # never handed out twice in one process
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert ports.free_port() % 16 == 1


def test_a_bound_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setattr(ports, "_ceiling", lambda: 10000 + 16 * 4)  # four candidates: 10005, 10021, 10037, 10053
    monkeypatch.setattr(ports, "_given", set())
    held = []
    try:
        for port in (10005, 10021, 10037):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                pytest.skip(f"port {port} is taken on this machine")
            held.append(s)
        assert ports.free_port() == 10053
        with pytest.raises(OSError, match="no free port below 10064"):
            ports.free_port()
    finally:
        for s in held:
            s.close()


def test_named_ports_are_distinct() -> None:
    got = ports.free_ports(["trainer", "monitor", "prometheus"])
    assert list(got) == ["trainer", "monitor", "prometheus"] and len(set(got.values())) == 3
