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

A whole scrape the cache knew line by line is also kept as a ``Layout``: the same text up to its values
next time (the usual case: an exporter writes the same lines in the same order) is read without a Python
step per line (``from_layout``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any


class Layout:
    """A scrape whose every sample line was a hit, by line position: the sample lines' texts before their
    last space (the entries' own key strings: no second copy of the text), every other line (comments,
    blanks) whole, and the hits' series and comment lines as the line by line path gave them."""

    __slots__ = ("lines", "keys", "others", "keys_at", "others_at", "series", "comments")

    def __init__(self, lines: int, sample_at: tuple[int, ...], keys: tuple[str, ...], other_at: tuple[int, ...],
                 others: tuple[str, ...], series: list[Any], comments: list[str]) -> None:
        self.lines, self.keys, self.others, self.series, self.comments = lines, keys, others, series, comments
        self.keys_at, self.others_at = _picker(sample_at), _picker(other_at)


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
        self.layout: Layout | None = None  # the last scrape, when all of it was hits

    def learn(self, comments: list[str], learnt: list[tuple[str, int, bool, str, Any]], lines: int) -> None:
        """``learnt``: (line key, comment index, inside, name, stored Series or None) of new samples."""
        if self.comments != comments or learnt:
            # a layout holds the series its lines had when it was learnt: a line learnt anew (a series
            # re-created, a family's membership moved) may now have another, so line by line first
            self.layout = None
        if self.comments != comments:
            self.comments, self.entries = comments, {}
        entries = self.entries
        for key, index, inside, name, series in learnt:
            if series is not None and not series.gone:
                entries[key] = Entry(series, index, inside, name)
        if len(entries) > 2 * lines + 64:  # lines that went away: keep the cache to the live series
            self.entries = {k: e for k, e in entries.items() if not e.series.gone}

    def learn_layout(self, text: str, known: list[Any], comments: list[str]) -> None:
        """Keep this scrape's layout when every sample line was a hit (``known``: the hits' series, in line
        order; a loop per line, once per change of the text's structure)."""
        if "\r" in text:  # CRLF: strip() cuts the \r and a layout would not, so these go line by line
            return
        lines = text.split("\n")
        sample_at = tuple(i for i, ln in enumerate(lines) if ln.strip() and ln.strip()[0] != "#")
        if len(sample_at) != len(known) or not sample_at:  # a line was parsed: not every one a hit
            return
        samples = set(sample_at)
        other_at = tuple(i for i in range(len(lines)) if i not in samples)
        canon = {k: k for k in self.entries}  # the key strings the entries hold, not new copies
        canon.update((c, c) for c in comments)
        keys = tuple(canon.get(k, k) for k in (lines[i].rpartition(" ")[0] for i in sample_at))
        others = tuple(canon.get(ln, ln) for ln in (lines[i] for i in other_at))
        self.layout = Layout(len(lines), sample_at, keys, other_at, others, known, comments)


def _picker(at: tuple[int, ...]) -> Callable[[list[str]], tuple[str, ...]]:
    """A list's items at ``at`` as a tuple, in one C call (``itemgetter`` of one index gives the item)."""
    if len(at) > 1:
        return itemgetter(*at)
    return lambda seq: tuple(seq[i] for i in at)


def from_layout(text: str, layout: Layout) -> tuple[str, ...] | None:
    """The value texts of a scrape laid out as ``layout`` (None: it is not, or a value is one the line by
    line path would not take as a hit). Why not that path: its loop was ~25 % of the monitor's CPU at 1000
    GPUs; the split, ``rpartition`` and comparisons here run in C, a whole exposition at a time.

    Exact: with every sample line's text before its last space and every other line the same, and values
    with neither whitespace nor ``_`` (so ``strip`` and ``rpartition`` cut each line where they cut the
    learnt one), the line by line path would find the same entries, hit for hit, in the same family states."""
    lines = text.split("\n")
    if len(lines) != layout.lines or layout.others_at(lines) != layout.others:
        return None
    samples = layout.keys_at(lines)  # the sample lines only: the comments were compared whole above
    parts = tuple(map(str.rpartition, samples, repeat(" ", len(samples))))
    if tuple(map(itemgetter(0), parts)) != layout.keys:
        return None
    texts = tuple(map(itemgetter(2), parts))
    joined = "".join(texts)
    if "" in texts or "_" in joined or not joined.isascii() or not joined.isprintable():
        return None
    if any(map(attrgetter("gone"), layout.series)):  # evicted: re-created through the slow path
        return None
    return texts
