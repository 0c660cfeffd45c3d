"""Issue 36: silence input validated in the model (finite times, a maximum duration, RE2 regexes), rows
stored before that check never break a listing, and a silence's cost does not grow with their number."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

import alerting.silence as silence_mod
from alerting.matchers import MAX_REGEX_LEN, Matcher, matcher_from_json, parse_matcher
from alerting.model import Alert
from alerting.silence import MAX_SILENCE_S, SilenceStore


def _store() -> SilenceStore:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE silences (id TEXT PRIMARY KEY, matchers TEXT, starts_at REAL, ends_at REAL, "
                 "created_by TEXT, comment TEXT, created_at REAL)")
    return SilenceStore(conn)


@pytest.mark.parametrize("end", [math.inf, 1e308, math.nan, 1000.0 + 1_000_000_000 * 3600.0])
def test_non_finite_or_endless_silences_are_refused(end: float) -> None:
    store = _store()
    with pytest.raises(ValueError, match="silence"):
        store.add(['alertname="X"'], 1000.0, end, now=1000.0)
    assert store.all() == []


def test_the_longest_silence_accepted_is_documented_and_a_far_start_is_refused() -> None:
    store = _store()
    store.add(['alertname="X"'], 0.0, MAX_SILENCE_S)
    with pytest.raises(ValueError, match="days"):
        store.add(['alertname="X"'], 0.0, MAX_SILENCE_S + 1)
    with pytest.raises(ValueError, match="start"):
        store.add(['alertname="X"'], 1e12, 1e12 + 60, now=0.0)


def test_rows_stored_before_validation_are_skipped_not_a_failed_listing(caplog: pytest.LogCaptureFixture) -> None:
    store = _store()
    good = store.add(['alertname="X"'], 0.0, 60.0)
    for i, end in enumerate((math.inf, 1e308, 3.6e12)):  # what the API used to accept
        store.conn.execute("INSERT INTO silences VALUES(?,?,?,?,?,?,?)",
                           (f"bad{i}", json.dumps(['alertname="X"']), 0.0, end, "api", "", 1.0))
    store.conn.execute("INSERT INTO silences VALUES(?,?,?,?,?,?,?)", ("junk", "not json", 0.0, 5.0, "x", "", 1.0))
    listed = [s.to_json(10.0) for s in store.all()]
    assert [s["id"] for s in listed] == [good]
    json.dumps(listed)
    assert sum("ignored" in r.getMessage() for r in caplog.records) == 4
    store.all()
    store.muting(10.0)(Alert({"alertname": "X"}))
    assert sum("ignored" in r.getMessage() for r in caplog.records) == 4  # each named once
    assert store.expire("bad0", 10.0)  # and the operator can still expire it by its id


@pytest.mark.timeout(20)
def test_regex_matchers_are_linear_time() -> None:
    # Python's re backtracks on this for minutes (2^40 paths); RE2 answers at once
    m = parse_matcher('alertname=~"(a+)+b"')
    assert not m.matches({"alertname": "a" * 40 + "c"})
    assert m.matches({"alertname": "aaab"})


@pytest.mark.parametrize("text", ['a=~"(x)\\1"', 'a=~"(?=x)x"', f'a=~"{"x" * (MAX_REGEX_LEN + 1)}"'])
def test_regexes_outside_re2_or_too_long_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="regex"):
        parse_matcher(text)
    with pytest.raises(ValueError, match="regex"):
        matcher_from_json({"name": "a", "value": text.split('"', 1)[1][:-1], "isRegex": True})


def test_silence_cost_is_per_label_set_not_per_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    for i in range(300):  # no equality matcher: every one is scanned
        store.add([f'alertname=~"Nope{i}.*"'], 0.0, 3600.0)
    calls = 0
    real = Matcher.matches

    def counted(self: Matcher, labels: dict[str, str]) -> bool:
        nonlocal calls
        calls += 1
        return real(self, labels)

    monkeypatch.setattr(Matcher, "matches", counted)
    alert = Alert({"alertname": "GPUXidError", "node": "n1"})
    assert not store.muting(10.0)(alert)
    first = calls
    for t in range(20, 220, 10):  # later ticks: the same alert, nothing new to match
        assert not store.muting(float(t))(alert)
    assert first >= 300 and calls == first


def test_listing_parses_the_table_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    for i in range(50):
        store.add([f'node="n{i}"'], 0.0, 3600.0)
    parsed = 0
    real = silence_mod.parse_matcher

    def counted(text: str) -> Matcher:
        nonlocal parsed
        parsed += 1
        return real(text)

    monkeypatch.setattr(silence_mod, "parse_matcher", counted)
    assert len(store.all()) == 50
    assert len(store.all()) == 50 and parsed == 50
    store.add(['node="late"'], 0.0, 60.0)
    assert len(store.all()) == 51 and parsed == 52  # only the new row: checked by add, read by the listing
    store.index(10.0)
    assert parsed == 52  # the index reuses the parsed rows
