"""In an alert storm the annotate stage renders the first plots at once, then one per refill period."""

from __future__ import annotations

from pathlib import Path

from alerting.clock import SimulatedClock
from alerting.vocabulary import Vocabulary
from monitor.book.annotate import PLOT_BURST, PLOT_REFILL_S, Annotator


def test_plots_past_the_burst_wait_for_the_bucket_to_refill(tmp_path: Path) -> None:
    clock = SimulatedClock(1_767_225_600.0)
    ann = Annotator(clock, lambda node: Vocabulary(), tmp_path)
    assert [ann._may_plot() for _ in range(PLOT_BURST + 5)] == [True] * PLOT_BURST + [False] * 5
    assert ann.plots_skipped == 5
    clock.advance(PLOT_REFILL_S)
    assert [ann._may_plot(), ann._may_plot()] == [True, False]  # one token a period
    clock.advance(100 * PLOT_REFILL_S)  # a quiet hour: the burst again, never more
    assert sum(ann._may_plot() for _ in range(3 * PLOT_BURST)) == PLOT_BURST
