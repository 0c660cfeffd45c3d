"""benchmarks/leak_random_walk.py: the leak detector on the 1000-GPU load's wandering GPU memory."""

from __future__ import annotations

import json

import pytest

from benchmarks.leak_random_walk import judge, main


def test_a_walk_is_judged_and_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--walks", "2", "--hours", "0.4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 0.4 h is under the 30-min window's 27 min to fill plus two judgements: nothing can fire yet
    assert out == {"benchmark": "leak_random_walk", "walks": 2, "hours": 0.4, "fired": 0, "median_first_fire_h": None,
                   "pages_per_walk": 0.0, "firing_share": 0.0}
    assert judge(0, 0.4).first_fire_h is None


def test_a_page_lasts_from_the_first_firing_until_ten_quiet_minutes() -> None:
    walk = judge(2, 1.5)  # seed 2 fires at 40 min, resolves and fires again within 1.5 h
    assert walk.first_fire_h is not None and walk.pages == 2
    # it cannot fire before the detector first did, nor page more than once per firing spell
    assert 0 < walk.firing_share <= 1 - walk.first_fire_h / 1.5


@pytest.mark.parametrize("bad", [["--walks", "0"], ["--hours", "nan"], ["--hours", "-1"]])
def test_bad_counts_exit_2(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(bad) == 2
    assert "must be > 0" in capsys.readouterr().err
