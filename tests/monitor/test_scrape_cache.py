"""The scrape cache (monitor/sources/scrape_cache.py) reaches the same series and values as parsing
every line, scrape after scrape, whatever changes between two scrapes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from monitor.series.store import SeriesStore, StoreLimits, series_key
from monitor.sources.prom_text import parse_exposition
from monitor.sources.scrape_cache import ScrapeCache, from_layout

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter-sample.prom"

BASE = """# HELP jobs_total Jobs.
# TYPE jobs_total counter
jobs_total{outcome="ok"} 3
jobs_total{outcome="error"} 0
jobs_created{outcome="ok"} 1.7e9
# TYPE calls counter
calls{model="a b"} 7
calls_created{model="a b"} 1.7e9
stray_gauge 1
calls{model="late"} 2
# TYPE lat summary
lat_sum 3.5
lat_count 2
lat_created 1.7e9
untyped_one{path="/x\\"y"} 4
stamped 5 1000
tabbed\t6
"""


def _uncached(text: str) -> dict:
    b = parse_exposition(text, 100.0, "t", "n1", {"job": "j"})
    return {series_key(s.name, s.labels): s.value for s in b.samples}, b.errors


def _cached(text: str, cache: ScrapeCache, store: SeriesStore) -> tuple[dict, dict, int]:
    b = parse_exposition(text, 100.0, "t", "n1", {"job": "j"}, cache=cache)
    got = {series_key(s.name, s.labels): s.value for s in b.samples}
    series, values, _ = b.known or ([], [], 0.0)
    for s, v in zip(series, list(values), strict=True):
        assert s.key not in got
        got[s.key] = v
    for s in b.samples:
        store.get_or_create(s.name, s.labels, "t")
    cache.learn(b.comments or [], [(k, i, ins, nm, store.get(series_key(s.name, s.labels)))
                                   for s, k, i, ins, nm in b.learn], len(got))
    return got, b.errors, len(series)


def _same(text: str, cache: ScrapeCache, store: SeriesStore) -> int:
    want, want_err = _uncached(text)
    got, err, hits = _cached(text, cache, store)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == v or (math.isnan(got[k]) and math.isnan(v)), k
    assert err == want_err
    return hits


def _bump(text: str) -> str:  # every value moves, as between two real scrapes
    out = []
    for ln in text.splitlines():
        head, sep, v = ln.rpartition(" ")
        out.append(f"{head} {float(v) + 1:g}" if sep and not ln.startswith("#") and "stamped" not in ln else ln)
    return "\n".join(out) + "\n"


def test_known_lines_skip_parsing_and_reach_the_same_series() -> None:
    cache, store = ScrapeCache(), SeriesStore()
    assert _same(BASE, cache, store) == 0  # first sight: everything is parsed
    hits = _same(_bump(BASE), cache, store)
    # every stored line but the stamped one and the tab-separated one is known
    assert hits == len(_uncached(BASE)[0]) - 2


@pytest.mark.parametrize("change", [
    lambda t: t.replace("stray_gauge 1\n", ""),                       # the family-closing sample went away
    lambda t: t.replace('calls{model="late"} 2\n', "") + 'calls{model="late"} 2\n',  # moved out of its family
    lambda t: t.replace("# TYPE calls counter", "# TYPE calls gauge"),  # a comment changed
    lambda t: t.replace('jobs_total{outcome="ok"} 3', 'jobs_total{outcome="ok"} abc'),  # no number
    lambda t: t.replace('jobs_total{outcome="ok"} 3', 'jobs_total{outcome="ok"} NaN'),
    lambda t: t.replace('jobs_total{outcome="ok"} 3', 'jobs_total{outcome="ok"} 1_0'),
    lambda t: t.replace('jobs_total{outcome="ok"} 3', 'jobs_total{outcome="ok"} 3 2000'),  # gained a stamp
    lambda t: "stray_first 1\n" + t,
    lambda t: t.replace("lat_count 2\n", "lat_count 2\nnew_series{a=\"1\"} 9\n"),
])
def test_any_change_between_scrapes_gives_what_parsing_gives(change) -> None:  # noqa: ANN001
    cache, store = ScrapeCache(), SeriesStore()
    _same(BASE, cache, store)
    _same(_bump(BASE), cache, store)
    _same(change(BASE), cache, store)
    _same(_bump(_bump(_bump(BASE))), cache, store)  # and back


def test_dcgm_fixture_is_all_hits_from_the_second_scrape() -> None:
    text = FIX.read_text()
    cache, store = ScrapeCache(), SeriesStore()
    _same(text, cache, store)
    assert _same(text, cache, store) == len(_uncached(text)[0])


def test_an_evicted_series_leaves_the_cache_and_is_created_again_through_the_store() -> None:
    cache = ScrapeCache()
    store = SeriesStore(StoreLimits(stale_after_s=1.0, evict_after_s=1.0))
    _same(BASE, cache, store)
    victim = store.get(series_key("stray_gauge", {"job": "j", "node": "n1"}))
    assert victim is not None
    victim.seen = -100.0
    assert store.evict_stale(10.0) >= 1 and victim.gone
    got, _, _ = _cached(_bump(BASE), cache, store)
    again = store.get(series_key("stray_gauge", {"job": "j", "node": "n1"}))
    assert again is not None and again is not victim and got[again.key] == 2.0


def test_the_daemon_teaches_each_target_its_cache_and_known_lines_are_stored(tmp_path: Path) -> None:
    import yaml

    import monitor.daemon as daemon_mod
    from monitor.config import load_config

    doc = {"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state.db"), "reward_outliers": False,
           "targets": [{"name": "t", "url": "http://127.0.0.1:1/metrics", "node": "n1"}]}
    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump(doc))
    d = daemon_mod.Daemon(load_config(tmp_path / "monitor.yaml"))
    try:
        target = d.config.targets[0]
        d.intake.caches[target.name] = target.cache  # what the daemon does when it builds the sources
        now = d.clock.now()
        texts = [BASE, _bump(BASE), _bump(_bump(BASE))]
        known = []
        for i, text in enumerate(texts):
            batch = parse_exposition(text, now + 5 * i, "t", "n1", {"job": "verl", "target": "t"},
                                     cache=target.cache)
            known.append(len(batch.known[0]) if batch.known else 0)
            d.ingest(batch, "t", now + 5 * i)
        assert known[0] == 0 and known[1] == known[2] > 0
        (s,) = [s for s in d.pipeline.store if s.name == "stray_gauge"]
        assert list(s.window()[1]) == [1.0, 2.0, 3.0]
    finally:
        d.close()


def test_openmetrics_text_with_a_cache_parses_and_caches_nothing() -> None:
    # a target answering in OpenMetrics (prometheus_client's parser) once raised UnboundLocalError on
    # every scrape when the target had a cache: the demo's process target went blind, its leak unseen
    text = ('# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1.5e+08\n'
            '# TYPE jobs counter\njobs_total{outcome="ok"} 3.0\n# EOF\n')
    cache = ScrapeCache()
    for t in (1.0, 2.0):
        batch = parse_exposition(text, t, "proc", None, {}, cache=cache)
        got = {s.name: s.value for s in batch.samples}
        assert got == {"process_resident_memory_bytes": 1.5e8, "jobs_total": 3.0}
        assert batch.known is None


def _kept(batch) -> dict:  # noqa: ANN001
    """What the pipeline keeps of one scrape: cache hits are stored first, then parsed samples; of a
    series given twice the first stored stays (the second is a duplicate timestamp)."""
    out: dict = {}
    series, values, _ = batch.known or ([], [], 0.0)
    for s, v in zip(series, list(values), strict=True):
        out.setdefault(s.key, v)
    for s in batch.samples:
        out.setdefault(series_key(s.name, s.labels), s.value)
    return out


@pytest.mark.parametrize("text", [
    # the same series under two spellings of its labels, the first stamped (never cached): parsed, it
    # comes before the second, which the cache knows
    f'x{{a="1",b="2"}} 7 {int(100.0 * 1000)}\nx{{b="2",a="1"}} 9\n',
    f'# TYPE x gauge\nx{{a="1"}} 7 {int(99.5 * 1000)}\nx{{a="1"}} 9\n',
])
def test_a_series_repeated_in_a_scrape_keeps_what_parsing_keeps(text: str) -> None:
    cache, store = ScrapeCache(), SeriesStore(StoreLimits())
    want = _kept(parse_exposition(text, 100.0, "t", "n1", {"job": "j"}))
    for _ in range(3):  # learnt on the first scrape, used on the next ones
        b = parse_exposition(text, 100.0, "t", "n1", {"job": "j"}, cache=cache)
        assert _kept(b) == want
        for s in b.samples:
            store.get_or_create(s.name, s.labels, "t")
        cache.learn(b.comments or [], [(k, i, ins, nm, store.get(series_key(s.name, s.labels)))
                                       for s, k, i, ins, nm in b.learn], len(want))


@pytest.mark.parametrize("line", ["x １２", "x 12 １０００", 'x{a="b"} ١٢', "x 1２"])
def test_digits_of_other_scripts_are_not_numbers(line: str) -> None:
    b = parse_exposition(line + "\n", 100.0, "t", "n1", {"job": "j"})
    assert b.samples == [] and b.errors == {"malformed_line": 1}
    om = parse_exposition(line + "\ny 3\n# EOF\n", 100.0, "t", "n1", {"job": "j"})  # OpenMetrics
    assert [s.name for s in om.samples] == ["y"] and om.errors == {"malformed_line": 1}
    cache, store = ScrapeCache(), SeriesStore(StoreLimits())
    ok = parse_exposition("x 12\n", 100.0, "t", "n1", {"job": "j"}, cache=cache)
    store.get_or_create(ok.samples[0].name, ok.samples[0].labels, "t")
    cache.learn(ok.comments or [], [(k, i, ins, nm, store.get(series_key(s.name, s.labels)))
                                    for s, k, i, ins, nm in ok.learn], 1)
    hit = parse_exposition("x １２\n", 100.0, "t", "n1", {"job": "j"}, cache=cache)  # a known line's value
    assert not hit.known and hit.samples == [] and hit.errors == {"malformed_line": 1}


# Every line a hit from the second scrape on: its layout is kept, and later scrapes laid out the same way are
# read from it (monitor.sources.scrape_cache.from_layout) instead of line by line.
ALL_HITS = """# HELP jobs_total Jobs.
# TYPE jobs_total counter
jobs_total{outcome="ok"} 3
jobs_total{outcome="error"} 0
# TYPE temp gauge
temp{gpu="0"} 40
temp{gpu="1"} 41

stray_gauge 1
"""


def test_a_scrape_laid_out_as_the_last_is_read_from_the_layout_with_the_same_result() -> None:
    cache, store = ScrapeCache(), SeriesStore()
    _same(ALL_HITS, cache, store)
    assert cache.layout is None  # first sight: parsed, learnt line by line
    assert _same(_bump(ALL_HITS), cache, store) == 5
    assert cache.layout is not None
    assert from_layout(_bump(_bump(ALL_HITS)), cache.layout) == ("5", "2", "42", "43", "3")
    assert _same(_bump(_bump(ALL_HITS)), cache, store) == 5


@pytest.mark.parametrize("change", [
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} 4_2'),    # float() reads it, the format does not
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} NaN'),    # counted, not stored
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} abc'),
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} 42 '),    # strip() moves where the value is
    lambda t: t.replace('temp{gpu="0"} 42', ' temp{gpu="0"} 42'),
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"}\t42'),
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} 42 1000'),  # gained a stamp
    lambda t: t.replace('temp{gpu="0"} 42', 'temp{gpu="0"} ４２'),    # another script's digits
    lambda t: t.replace("\n", "\r\n"),
    lambda t: t.replace("# TYPE temp gauge", "# TYPE temp counter"),  # a comment changed
    lambda t: t.replace("\nstray_gauge", "\n\nstray_gauge"),         # a blank line more
    lambda t: t.replace('temp{gpu="0"} 42\ntemp{gpu="1"} 43', 'temp{gpu="1"} 43\ntemp{gpu="0"} 42'),
    lambda t: t.replace("stray_gauge 3\n", "stray_gauge 3\nnew_one 1\n"),
    lambda t: t.replace("stray_gauge 3\n", ""),
])
def test_any_change_from_a_layout_gives_what_parsing_gives(change) -> None:  # noqa: ANN001
    cache, store = ScrapeCache(), SeriesStore()
    _same(ALL_HITS, cache, store)
    _same(_bump(ALL_HITS), cache, store)
    assert cache.layout is not None
    _same(change(_bump(_bump(ALL_HITS))), cache, store)
    _same(_bump(_bump(_bump(ALL_HITS))), cache, store)  # and back
    _same(_bump(ALL_HITS), cache, store)


def test_a_series_evicted_under_a_layout_is_created_again_through_the_store() -> None:
    cache = ScrapeCache()
    store = SeriesStore(StoreLimits(stale_after_s=1.0, evict_after_s=1.0))
    _same(ALL_HITS, cache, store)
    _same(_bump(ALL_HITS), cache, store)
    assert cache.layout is not None
    victim = store.get(series_key("stray_gauge", {"job": "j", "node": "n1"}))
    assert victim is not None
    victim.seen = -100.0
    assert store.evict_stale(10.0) >= 1 and victim.gone
    assert from_layout(_bump(ALL_HITS), cache.layout) is None
    got, _, _ = _cached(_bump(ALL_HITS), cache, store)
    again = store.get(series_key("stray_gauge", {"job": "j", "node": "n1"}))
    assert again is not None and again is not victim and got[again.key] == 2.0
