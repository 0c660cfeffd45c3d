"""Prometheus' scrape cache for one target: the raw series text of a line -> the stored series.

A known line (same text up to its value, under the same comment line of an exposition whose comment
lines are unchanged) skips label parsing, dict building, the store's key lookup and rule matching: only
its value is read, all of a scrape's known values in one vectorised step. New or changed lines take the
slow path (``prom_text.parse_exposition``) and are learnt once the pipeline has stored them.

Exact by construction: an entry is used only where parsing the line would reach the same series. The
grouping of samples into families (counter ``_total`` naming, ``_created`` dropped) depends only on the
comment lines and on which samples fall outside the open family; so an entry records the comment line it
sat under and whether it was inside that family, both are checked on every hit (the family state moves
exactly as parsing the line would), and a scrape whose comment lines differ from the learnt ones is
parsed whole and learnt again. Lines with their own timestamp are never cached, nor samples the slow path
did not store. An evicted series (staleness, fair share) is ``gone``: its line takes the slow
path again and is re-created through the store's budget rules.
"""

from __future__ import annotations

from typing import Any


class Entry:
    """A known line: its series, the comment line it sits under and whether it is inside that family."""

    __slots__ = ("series", "index", "inside", "name")

    def __init__(self, series: Any, index: int, inside: bool, name: str) -> None:
        self.series, self.index, self.inside, self.name = series, index, inside, name


class ScrapeCache:
    """Learnt per target; ``prom_text._families_fast`` reads it, the daemon teaches it after ingest."""

    def __init__(self) -> None:
        self.comments: list[str] | None = None  # comment lines of the exposition the entries were learnt on
        self.entries: dict[str, Entry] = {}  # line text before its value -> entry

    def learn(self, comments: list[str], learnt: list[tuple[str, int, bool, str, Any]], lines: int) -> None:
        """``learnt``: (line key, comment index, inside, name, stored Series or None) of new samples."""
        if self.comments != comments:
            self.comments, self.entries = comments, {}
        entries = self.entries
        for key, index, inside, name, series in learnt:
            if series is not None and not series.gone:
                entries[key] = Entry(series, index, inside, name)
        if len(entries) > 2 * lines + 64:  # lines that went away: keep the cache to the live series
            self.entries = {k: e for k, e in entries.items() if not e.series.gone}
