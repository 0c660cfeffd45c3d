"""The crash-point test: the alert path (alert book -> engine -> outbox -> robot) killed right after
each of its commits, restarted, and run to the end (harness/crashpoint.py). After every restart each
alert was paged FIRING once (at most one duplicate: the message in flight), its RESOLVED was delivered,
and nothing resolved paged again (the scenario runs two repeat_intervals past the last resolve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.crashpoint import WINDOWS, crash_at, kill_in_flight, run_all
from harness.standin import WebhookStandIn


@pytest.mark.slow
def test_every_commit_boundary_keeps_the_three_promises(tmp_path: Path) -> None:
    result = run_all(tmp_path)
    assert result["clean_problems"] == []
    assert result["commits_per_clean_run"] >= 12  # book, engine, claim and outcome commits of 3 alerts
    assert result["crash_points"] == result["commits_per_clean_run"]  # every boundary really killed it
    assert result["failed_points"] == {}
    assert result["lost_pages"] == 0 and result["repaged_after_resolve"] == 0


def test_a_kill_between_the_books_commit_and_the_engine_pages_after_restart(tmp_path: Path) -> None:
    # Commit 1 is the alert book's firing of n1; the engine never heard of it before the kill.
    robot = WebhookStandIn()
    try:
        v = crash_at(tmp_path, robot, 1)
    finally:
        robot.close()
    assert v.killed and v.problems() == []
    assert v.firing == {n: 1 for n in WINDOWS} and v.resolved == {n: 1 for n in WINDOWS}


def test_sigkill_with_a_page_in_flight_sends_it_at_most_once_more(tmp_path: Path) -> None:
    robot = WebhookStandIn()
    try:
        v = kill_in_flight(tmp_path, robot)
    finally:
        robot.close()
    assert v.killed and v.problems() == []
    assert sorted(v.firing.values()) == [1, 1, 2]  # the message in flight, and only it, went twice
    assert v.resolved == {n: 1 for n in WINDOWS}
