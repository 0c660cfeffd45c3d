"""The daemon's event loop: uvloop where it is installed, asyncio's own where it is not."""

from __future__ import annotations

import asyncio
import sys

import pytest

from monitor.serve import run_event_loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_the_daemon_runs_on_uvloop_where_installed() -> None:
    pytest.importorskip("uvloop")
    assert run_event_loop(_loop_module()).startswith("uvloop")


def test_without_uvloop_it_runs_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert run_event_loop(_loop_module()).startswith("asyncio")
