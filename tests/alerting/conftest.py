"""Repository root on sys.path (``tests.alerting.fakes`` / ``helpers`` are imported by path), plus fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402

from alerting.clock import SimulatedClock  # noqa: E402
from tests.alerting.fakes import FakeDingTalk, FakeFeishu, FakeWebhook, FakeWeCom  # noqa: E402
from tests.alerting.helpers import T0  # noqa: E402


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(T0)


@pytest.fixture
def fakes(clock: SimulatedClock) -> Iterator[dict[str, Any]]:
    made = {"dingtalk": FakeDingTalk(clock=clock), "wecom": FakeWeCom(clock=clock),
            "feishu": FakeFeishu(clock=clock), "webhook": FakeWebhook(clock=clock)}
    yield made
    for f in made.values():
        f.close()
