"""Scrape Prometheus text / OpenMetrics endpoints (trainer, dcgm-exporter, node exporter) through
``scrape_http`` (h11 for plain http, httpx otherwise), all targets concurrently, each with its own
timeout; one bad target never delays or breaks another."""

from __future__ import annotations

import asyncio
import functools
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from monitor.model import Sample, SourceBatch, resolve_node, with_node
from monitor.sources.base import within
from monitor.sources.scrape_cache import ScrapeCache, from_layout
from monitor.sources.scrape_http import ScrapeFailed, fetch

# our trainer's global rank 0 exports every rank's times, each labelled with that rank's host
PER_RANK_PREFIX = "verl_rank_"


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    node: str | None = None
    job: str = "verl"
    interval: float = 5.0
    timeout: float = 3.0              # deadline for the whole request: connect, headers and body
    body_size_limit: int = 32 * 1024 * 1024  # bytes of body a scrape may read; 0 = no limit
    sample_limit: int = 0             # samples one scrape may yield (Prometheus' sample_limit); 0 = no limit
    label_limit: int = 0              # labels one sample may carry (Prometheus' label_limit); 0 = no limit
    label_value_length_limit: int = 0  # characters of one label value; 0 = no limit
    honor_timestamps: bool = True     # False: every sample gets the scrape time, whatever it is stamped
    labels: tuple[tuple[str, str], ...] = ()  # attached to every sample (a file_sd group's labels)
    # Its known lines (Prometheus' scrape cache); empty until the daemon teaches it what it stored.
    cache: ScrapeCache = field(default_factory=ScrapeCache, compare=False, repr=False)


# Prometheus-like bounds for stamps a target writes (honor_timestamps): a sample stamped further back
# than PAST_S or further ahead than FUTURE_S is refused (counted per target, logged once a minute);
# liveness (``up``, absence rules) comes from the scrape's success. PAST_S is the 5-min lookback delta
# (``stale_after_s``), not the TSDB head's bound: a sample stamped 5-10 min late used to be
# stored, yet was already past every rule's freshness horizon, so its alert never fired and nothing
# said so. Refused and counted (``too_old_timestamp``), the loss is visible and has a named fix.
PAST_S = 300.0
FUTURE_S = 600.0


# Why our own parser: at 1000 GPUs (250 targets, ~52 500 samples per 5 s round) prometheus_client's
# text parser walks every label character in Python: the whole parse_exposition cost 1.43 s CPU per
# round, 0.26 s with one regex per line (5.6x, samples built included). It handles the common case
# (text format 0.0.4: ``name{labels} value [timestamp]``, comments, the ``\\ \" \n`` escapes); any
# line it does not recognise goes to prometheus_client, and OpenMetrics bodies go to it whole.
_SAMPLE_RE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*(?:\\.[^"\\]*)*",?)*)\})?'
    r'[ \t]+(\S+)(?:[ \t]+(\S+))?')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*(?:\\.[^"\\]*)*)"')
_ESCAPE_RE = re.compile(r'\\[\\n"]')
_ESCAPES = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_SUFFIXES = {"counter": ("",), "gauge": ("",), "summary": ("_count", "_sum", ""),
             "histogram": ("_count", "_sum", "_bucket")}
_COUNTABLE = ("counter", "histogram", "summary")
RawSample = tuple[str, dict[str, str], float, "float | None"]


@dataclass
class _Family:
    name: str
    typ: str
    samples: list[RawSample]


def parse_exposition(text: str, t: float, source: str, node: str | None, extra: dict[str, str],
                     honor_timestamps: bool = True, cache: ScrapeCache | None = None) -> SourceBatch:
    """Parse exposition text into samples; a malformed line costs only itself (counted, never fatal).
    Without ``honor_timestamps`` every sample is stamped ``t`` (the scrape time). With ``cache``, lines
    it knows become ``batch.known`` (series, values) and the rest samples, each with its cache key in
    ``batch.learn`` for ``ScrapeCache.learn`` once stored."""
    batch = SourceBatch(source)
    scan = _Scan(cache if cache is not None and cache.comments is not None else None)
    if scan.cache is not None and scan.cache.layout is not None:
        hits = from_layout(text, scan.cache.layout)
        values = _values(hits) if hits is not None else None
        if values is not None:  # the same lines as the last scrape, every one a hit: as line by line
            scan.known, scan.comments = scan.cache.layout.series, scan.cache.layout.comments
            _known(batch, scan, values, t)
            return batch
    values: np.ndarray | None = None  # OpenMetrics text takes prometheus_client's parser: nothing cached
    if _is_openmetrics(text):
        families = _families_prometheus_client(text, batch)
    else:
        families = _families_fast(text, batch, scan)
        values = _values(scan.texts)
        if scan.cache is not None and (values is None or scan.comments != scan.cache.comments):
            # the structure changed, or a known line's value is no number: the whole text, uncached
            batch, scan = SourceBatch(source), _Scan(None)
            families = _families_fast(text, batch, scan)
            values = np.empty(0)
    # prometheus_client writes each counter's creation time as a separate `<name>_created` gauge
    # family in the text format: plumbing, not a measurement, and it would double the series count.
    countable = {f.name for f in families if f.typ in _COUNTABLE}
    samples = batch.samples
    for fam in families:
        if fam.name.endswith("_created") and fam.name[: -len("_created")] in countable:
            continue
        typed = fam.typ in _COUNTABLE
        for name, labels, value, ts in fam.samples:
            if typed and name.endswith("_created"):
                continue
            if not math.isfinite(value):
                batch.error("nonfinite_value")
                continue
            labels.update(extra)
            if not (name.startswith(PER_RANK_PREFIX) and labels.get("node")):
                labels["node"] = resolve_node(labels, node)  # a per-rank series names its rank's own host
            samples.append(Sample(name, labels, value, ts if ts is not None and honor_timestamps else t))
    if cache is not None and values is not None and scan.known and samples and _overlap(scan.known, samples):
        # a series repeated in the scrape, one line a cache hit and another parsed: hits are stored before
        # parsed samples, which would change which repeat is kept (the first, as Prometheus keeps it);
        # the scrape is parsed whole instead, in text order
        return parse_exposition(text, t, source, node, extra, honor_timestamps)
    if cache is not None and values is not None:
        _known(batch, scan, values, t)
        if scan.cache is not None and not batch.samples:
            scan.cache.learn_layout(text, scan.known, scan.comments)
    return batch


def _overlap(known: list[Any], samples: list[Sample]) -> bool:
    """Whether a parsed sample is of a series the cache resolved too (compared by name first: cheap)."""
    names = {s.name for s in samples}
    hits = {(s.name, frozenset(s.labels.items())) for s in known if s.name in names}
    return bool(hits) and any((s.name, frozenset(s.labels.items())) in hits for s in samples)


def _values(texts: list[str]) -> np.ndarray | None:
    """A scrape's known values in one vectorised read (numpy reads each text as float() does)."""
    try:
        return np.array(texts, dtype=np.float64) if texts else np.empty(0)
    except ValueError:
        return None


def _known(batch: SourceBatch, scan: _Scan, values: np.ndarray, t: float) -> None:
    """The cache's hits onto the batch (non-finite values counted, not stored) and the keys to learn."""
    finite = np.isfinite(values)
    series = scan.known
    if not finite.all():
        batch.error("nonfinite_value", int((~finite).sum()))
        series = [s for s, ok in zip(series, finite.tolist(), strict=True) if ok]
        values = values[finite]
    batch.known = (series, values, t) if series else None
    keys = scan.keys
    batch.learn = [(s, *keys[id(s.labels)]) for s in batch.samples if id(s.labels) in keys]
    batch.comments = scan.comments


def _is_openmetrics(text: str) -> bool:
    return text.rstrip().endswith("# EOF")


class _Scan:
    """One fast parse's view of the scrape cache: hits found, the comment lines, keys of new samples."""

    def __init__(self, cache: ScrapeCache | None) -> None:
        self.cache = cache
        self.comments: list[str] = []
        self.known: list[Any] = []
        self.texts: list[str] = []
        # id(labels) -> (line key, comment index, inside its family, sample name as parsed)
        self.keys: dict[int, tuple[str, int, bool, str]] = {}


def _families_fast(text: str, batch: SourceBatch, scan: _Scan) -> list[_Family]:
    """Group samples into families the way prometheus_client's 0.0.4 parser does (HELP/TYPE open a
    family, a sample outside the open family's names is an untyped singleton), so that counters get
    the same ``_total`` names and ``_created`` filtering as before.

    A line the scrape cache knows under the same comment line and with the same family membership is a
    hit: its value text is kept, the line is not parsed (the family state moves exactly as parsing it
    would). Whether the cache applies at all is decided by the caller: the comment lines must be equal."""
    families: list[_Family] = []
    cur: _Family | None = None
    allowed: tuple[str, ...] = ()
    entries = scan.cache.entries if scan.cache is not None else None
    comments = scan.comments
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            comments.append(line)
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue
            name = parts[2]
            if parts[1] == "HELP":
                if cur is None or cur.name != name:
                    cur = _Family(name, "untyped", [])
                    families.append(cur)
                    allowed = (name,)
                continue
            typ = parts[3].strip() if len(parts) == 4 else ""
            if typ not in ("counter", "gauge", "summary", "histogram", "untyped"):
                batch.error("malformed_line")
                continue
            if cur is None or cur.name != name:
                cur = _Family(name, typ, [])
                families.append(cur)
            cur.typ = typ
            allowed = tuple(name + s for s in _SUFFIXES.get(typ, ("",)))
            continue
        key, _, value_text = line.rpartition(" ")
        if entries is not None:
            e = entries.get(key)
            if (e is not None and e.index == len(comments) and not e.series.gone and "_" not in value_text
                    and value_text.isascii()):
                inside = cur is not None and e.name in allowed
                if inside == e.inside:
                    if not inside:
                        cur, allowed = None, ()
                    scan.known.append(e.series)
                    scan.texts.append(value_text)
                    continue
        sample = _parse_line(line) or _parse_line_prometheus_client(line)
        if sample is None:
            batch.error("malformed_line")
            continue
        inside = cur is not None and sample[0] in allowed
        if inside:
            cur.samples.append(sample)  # type: ignore[union-attr]
        else:
            cur, allowed = None, ()
            families.append(_Family(sample[0], "untyped", [sample]))
        if sample[3] is None and _number(value_text) == sample[2]:  # the key reads back as this line
            scan.keys[id(sample[1])] = (key, len(comments), inside, sample[0])
    for fam in families:  # prometheus_client's counter munging: family `x`, samples `x_total`
        if fam.typ == "counter":
            if fam.name.endswith("_total"):
                fam.name = fam.name[: -len("_total")]
            else:
                fam.samples = [(sys.intern(n + "_total"), lb, v, ts) for n, lb, v, ts in fam.samples]
    return families


def _parse_line(line: str) -> RawSample | None:
    m = _SAMPLE_RE.fullmatch(line)
    if m is None:
        return None
    name, label_text, value_text, ts_text = m.groups()
    labels: dict[str, str] = {}
    if label_text:
        pairs = _LABEL_RE.findall(label_text)
        for key, val in pairs:  # interned: a GPU's UUID, model, host are one string for all its series
            labels[sys.intern(key)] = sys.intern(_ESCAPE_RE.sub(_unescape, val) if "\\" in val else val)
        if len(labels) != len(pairs) or "__name__" in labels:
            return None  # duplicate or __name__ label: prometheus_client decides
    value = _number(value_text)
    if value is None:
        return None
    ts = None
    if ts_text is not None:
        ms = _number(ts_text)
        if ms is None:
            return None
        ts = ms / 1000
    return sys.intern(name), labels, value, ts  # one name string for all series of a metric


def _unescape(m: re.Match[str]) -> str:
    return _ESCAPES[m.group(0)]


def _number(s: str) -> float | None:
    # float() accepts digit separators and any script's digits ("１２"); the exposition format does not
    if "_" in s or not s.isascii():
        return None
    try:  # correctly rounded, so equal to prometheus_client's float(int(s)) for integers too
        return float(s)
    except ValueError:
        return None


def _ascii_numbers(line: str) -> bool:
    """Whether the value and timestamp of a sample line are ASCII: prometheus_client reads them with
    float(), which takes any script's digits; Prometheus does not."""
    return line[line.rfind("}") + 1:].isascii()


def _parse_line_prometheus_client(line: str) -> RawSample | None:
    # The conversion sits inside the try too: prometheus_client keeps a 400-digit integer as an int,
    # and float() of it raises OverflowError (it used to end the target's scrape loop).
    if not _ascii_numbers(line):
        return None
    try:
        fams = list(text_string_to_metric_families(line + "\n"))
        if len(fams) != 1 or len(fams[0].samples) != 1:
            return None
        s = fams[0].samples[0]
        return s.name, dict(s.labels), float(s.value), float(s.timestamp) if s.timestamp is not None else None
    except Exception:
        return None


def _families_prometheus_client(text: str, batch: SourceBatch) -> list[_Family]:
    """The previous path, kept for OpenMetrics: prometheus_client stops at the first malformed line,
    so on error the text is parsed line by line and a bad line costs only itself."""
    try:
        if not text.isascii() and not all(_ascii_numbers(ln) for ln in text.splitlines() if ln[:1] != "#"):
            raise ValueError("a value in another script's digits")  # taken line by line, those lines refused
        fams = list(text_string_to_metric_families(text))
    except Exception:
        fams = []
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            if not _ascii_numbers(line):
                batch.error("malformed_line")
                continue
            try:
                fams.extend(text_string_to_metric_families(line + "\n"))
            except Exception:
                batch.error("malformed_line")
    out = []
    for f in fams:
        samples: list[RawSample] = []
        for s in f.samples:
            try:
                samples.append((s.name, dict(s.labels), float(s.value),
                                float(s.timestamp) if s.timestamp is not None else None))
            except (OverflowError, TypeError, ValueError):
                batch.error("malformed_value")
        out.append(_Family(f.name, f.type, samples))
    return out


def over_limit(batch: SourceBatch, target: Target, ours: set[str]) -> str | None:
    """The limit this scrape exceeds (``sample_limit``, ``label_limit``, ``label_value_length_limit``),
    counted on the target's own labels: the ones the monitor attaches (``ours``) are its configuration."""
    known = len(batch.known[0]) if batch.known else 0  # lines the scrape cache knows: checked when learnt
    if target.sample_limit and len(batch.samples) + known > target.sample_limit:
        return "sample_limit"
    added = len(ours)
    if target.label_limit and any(len(s.labels) - added > target.label_limit for s in batch.samples):
        return "label_limit"
    n = target.label_value_length_limit
    if n and any(len(v) > n for s in batch.samples for k, v in s.labels.items() if k not in ours):
        return "label_value_length_limit"
    return None


def refuse_out_of_bounds(batch: SourceBatch, now: float) -> None:
    """Drop samples stamped more than PAST_S before or FUTURE_S after ``now`` (counted by reason)."""
    lo, hi = now - PAST_S, now + FUTURE_S
    if all(lo <= s.t <= hi for s in batch.samples):
        return
    kept = [s for s in batch.samples if lo <= s.t <= hi]
    batch.refused = [s for s in batch.samples if not lo <= s.t <= hi]  # still proof the series is alive
    old = sum(s.t < lo for s in batch.samples)
    if old:
        batch.error("too_old_timestamp", old)
    if len(batch.samples) - len(kept) - old:
        batch.error("future_timestamp", len(batch.samples) - len(kept) - old)
    batch.samples[:] = kept


@functools.lru_cache(maxsize=4096)
def _instance(url: str) -> str:
    """The URL's host:port (httpx parses a URL in ~0.1 ms: once per target, not per scrape)."""
    return httpx.URL(url).netloc.decode()


async def scrape(client: httpx.AsyncClient, target: Target, now: float) -> tuple[SourceBatch, float, bool]:
    """One scrape: (batch, duration seconds, up). Also yields the synthetic ``up`` series.

    ``target.timeout`` bounds the whole request (connect, headers and body), as Prometheus' scrape
    timeout does: httpx's own timeouts are per read, so a target dripping a byte a second would never
    time out by them alone."""
    started = time.perf_counter()
    # `instance` as Prometheus attaches it: without a configured node, every series of the target gets
    # the host part as its `node` (resolve_node), as Prometheus' relabelling in prometheus.yml does
    instance = _instance(target.url)
    extra = {"job": target.job, "target": target.name, "instance": instance, **dict(target.labels)}
    up = False
    batch = SourceBatch(target.name)
    try:
        body, charset = await within(fetch(client, target.url, target.timeout, target.body_size_limit),
                                     target.timeout)
        batch = parse_exposition(body.decode(charset or "utf-8", errors="replace"), now, target.name,
                                 target.node, extra, target.honor_timestamps, target.cache)
        over = over_limit(batch, target, {*extra, "node"})
        if over:  # Prometheus: the scrape fails as a whole, none of its samples is stored
            batch = SourceBatch(target.name, errors=batch.errors)
            batch.error(over)
        elif not batch.samples and not batch.known and batch.errors.get("malformed_line"):
            pass  # nothing but garbage: the target answers, but not with exposition text (up stays 0)
        else:
            up = True
            refuse_out_of_bounds(batch, now)
    except ScrapeFailed as exc:
        batch.error(exc.reason)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        batch.error("timeout")
    except httpx.HTTPError as exc:
        batch.error(type(exc).__name__.lower())
    except LookupError:  # an unknown charset in Content-Type
        batch.error("bad_charset")
    batch.samples.append(Sample("up", with_node(dict(extra), target.node), 1.0 if up else 0.0, now))
    return batch, time.perf_counter() - started, up
