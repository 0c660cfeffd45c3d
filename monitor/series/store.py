"""Series store: bounded per-series history (a numpy ring, or compressed chunks behind one), staleness, cardinality caps shared fairly
between sources, and eviction of series no longer seen.

Every sample enters here before any detector sees it, already in base units and our names: the
sources rename foreign metrics and convert their units before a batch leaves them
(``monitor/sources/relabel.py``), so one rule threshold serves every name family.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import sub
from typing import Any

import numpy as np

from monitor.series import chunks
from monitor.series.selectors import Selector

SeriesKey = tuple[str, tuple[str, ...]]
CHUNK = 64  # samples per compressed chunk: a longer history is sealed chunks behind a raw head of this size
# What a series no rule, plot or diagnosis reads keeps: its interval() (median of the last 16 gaps) and
# last value need 17 samples; nothing else reads its history (the HTTP API serves no series data).
UNREAD_HISTORY = 17  # was 20: 48 B more for each of ~39 000 such series at 1000 GPUs, read by nothing
HEAD_MIN = 16  # a new head's room; it doubles up to CHUNK
# A long history's older chunks are merged, BLOCK // CHUNK at a time, into blocks of BLOCK samples: ~30 % fewer
# bytes a sample (a gauge of the 1000-GPU load 2.3 B against 3.3: the per-chunk object and deflate framing,
# and more context for deflate), lossless, decoded as before. Only histories of at least MERGE_FROM samples:
# the oldest block goes whole, so a history holds up to BLOCK + CHUNK samples beyond its capacity.
BLOCK = 512
MERGE_FROM = 4 * BLOCK
# longest_gap() forgets a long gap not seen again within this many samples (verl validates every 5-50 steps)
LONG_GAP_SAMPLES = 64
TAIL = 17  # times of a sealed head kept raw: interval() reads the last 17 samples, all of them may be sealed
YOUNG_EVICT_INTERVALS = 10.0  # a series with no cadence of its own yet lives this many of its source's intervals
_ZERO, _INF = array("d", [0.0]), math.inf  # _ZERO * 2n: n samples' times then values (array("d", bytes) adds ~15 %)


def series_key(name: str, labels: dict[str, str]) -> SeriesKey:
    """(name, (label1, value1, label2, value2, ...)) by label: the labels one flat tuple, not a tuple of
    pairs (a dozen fewer objects per series; names and values alternate, so it is as unique), and apart
    from the name, so the store shares one labels tuple between every series that has the same labels
    (one GPU's ~28 DCGM fields: ~100 B a series at 1000 GPUs, ``SeriesStore``'s label sets)."""
    return (name, tuple(x for kv in sorted(labels.items()) for x in kv))


class Series:
    """One series' recent history: the last ``capacity`` samples (oldest dropped); its readers raise the
    capacity with ``reserve`` (monitor/README.md, "Series store").

    A short history (``capacity <= CHUNK``) is one raw ring of exactly that size. A longer one is a raw head
    of up to ``CHUNK`` samples (its buffer grows 16, 32, 64 as it fills) and the chunks sealed before it, each compressed losslessly (``monitor.series.chunks``,
    ~3-5 B a sample against 16): the memory of a full history is ~5x smaller, it is allocated when the
    sample comes rather than by doubling, and only a plot, a diagnosis or a re-sized step-cadence detector
    (``detectors/cadence.py``, replaying its series) decodes it."""

    __slots__ = ("name", "key", "id", "_buf", "_n", "_head", "_chunks", "_blocks", "last_t", "last_v",
                 "_interval", "_interval_at", "source", "seen", "gone", "_capacity", "_tail", "_long_gap",
                 "_long_gap_age", "bound")

    def __init__(self, name: str, labels: dict[str, str], capacity: int, sid: int, source: str = "",
                 key: SeriesKey | None = None) -> None:
        self.name = name
        # the labels live only in the key (a dict per series was ~300 B x 53 000): ``labels`` rebuilds them
        self.key = key if key is not None else series_key(name, labels)  # the store's own key: one tuple
        self.id = sid
        self.source = source      # the source (scrape target, log) that created it: whose budget it uses
        self.seen = -math.inf     # monitor clock time the series last appeared in its source's input
        self.gone = False         # evicted: whoever still holds it (a scrape cache) must let it go
        # Times, then values, in one float64 array.array (np.frombuffer views it as (2, n)): 48 B less than a numpy
        # array, a sample stored in ~40 ns where numpy's scalar item assignment took ~70 (two each, 56 000 every 5 s)
        self._capacity = max(1, capacity)
        self._chunks: list[bytes] | None = None  # sealed chunks, oldest first (None: one raw ring)
        self._blocks = 0  # how many of them, first, are merged blocks of BLOCK samples
        self._buf = _ZERO * 2 * min(self._capacity, CHUNK if self._capacity <= CHUNK else HEAD_MIN)
        self._n = 0       # samples in the raw ring, or in the head
        self._head = 0    # the ring's next slot (ring), unused with chunks (the head fills from 0)
        if self._capacity > CHUNK:
            self._chunks = []
        self.last_t = -math.inf
        self.last_v = math.nan
        self._interval = 0.0
        self._interval_at = -math.inf
        self._tail: bytes | None = None  # the last TAIL times of the newest sealed chunk
        self._long_gap = 0.0   # the longest gap between two samples of about the last LONG_GAP_SAMPLES
        self._long_gap_age = 0
        self.bound: Any = None  # the evaluator's rule bindings of this series (None: not bound yet)

    @property
    def labels(self) -> dict[str, str]:
        """A new dict of the labels (from the key: binding, alerts' labels and evidence read it, never
        a sample's path)."""
        pairs = self.key[1]
        return dict(zip(pairs[::2], pairs[1::2], strict=True))

    @property
    def capacity(self) -> int:
        return self._capacity

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` samples from now on (a reader that needs more history came); never
        less than before, keeping what it holds."""
        if capacity <= self._capacity:
            return
        t, v = self._raw()
        self._capacity = capacity
        if capacity > CHUNK:
            if self._chunks is None:  # the ring (<= CHUNK samples) becomes the head
                self._chunks = []
                if t.size == CHUNK:  # a full ring of CHUNK samples is a chunk already (as a head it
                    # had no room for the next sample)
                    self._chunks.append(chunks.encode(np.ascontiguousarray(t), np.ascontiguousarray(v)))
                    self._tail = t[CHUNK - TAIL:].tobytes()
                    t, v = t[:0], v[:0]
                self._buf = _ZERO * 2 * max(HEAD_MIN, t.size)
                np.frombuffer(self._buf).reshape(2, -1)[:, : t.size] = t, v
                self._n = t.size
        else:
            self._buf = _ZERO * 2 * capacity
            np.frombuffer(self._buf).reshape(2, -1)[:, : t.size] = t, v
            self._n, self._head = t.size, t.size % capacity

    def _raw(self) -> tuple[np.ndarray, np.ndarray]:
        """The raw samples (the ring's, oldest first, or the head's): views or copies."""
        tv = np.frombuffer(self._buf).reshape(2, -1)
        if self._chunks is not None or self._n < tv.shape[1]:
            return tv[0, : self._n], tv[1, : self._n]
        h = self._head
        return np.concatenate([tv[0, h:], tv[0, :h]]), np.concatenate([tv[1, h:], tv[1, :h]])

    def interval(self, n: int = 16) -> float:
        """Median of the last ``n`` sample intervals (0.0 with fewer than 3): the series' own cadence,
        a scrape interval or, for a per-step log, the step time. Cached until the next sample."""
        if self._interval_at == self.last_t:
            return self._interval
        k = min(len(self), n + 1)
        if k < 4:
            return 0.0
        # In Python floats, the gaps by map(sub): ~3 us where numpy took ~20; the same median of the sorted gaps
        buf, m = self._buf, self._n
        if self._chunks is None:
            cap = len(buf) // 2
            times = buf[:cap].tolist()
            ts = times[self._head:] + times[:self._head] if m == cap else times[:m]
            ts = ts[-k:]
        elif m >= k:
            ts = buf[m - k: m].tolist()
        else:  # the head sealed under k samples ago: the rest are the sealed head's last times
            tail = self._tail if self._tail is not None and len(self._tail) >= 8 * (k - m) else \
                self._newest_sealed_times().tobytes()
            ts = np.frombuffer(tail, np.float64)[m - k:].tolist() + buf[:m].tolist()
        gaps = sorted(map(sub, ts[1:], ts))  # map: 1.4 us where a generator took 2.7
        h = len(gaps) // 2
        self._interval = gaps[h] if len(gaps) % 2 else (gaps[h - 1] + gaps[h]) / 2
        self._interval_at = self.last_t
        return self._interval

    def longest_gap(self) -> float:
        """The longest gap after which this series came back, among about its last ``LONG_GAP_SAMPLES``
        samples (kept as they arrive, O(1): a window re-read per active alert per tick would cost what
        chunked history saves). A per-step log's validation and checkpoint steps run several of its
        median steps; a finding must not go stale across the next one (see the evaluator's horizon)."""
        return self._long_gap

    def first_gaps(self) -> float:
        """The mean gap between the samples of a series too young for ``interval`` (0.0 with one): a
        lower bound on its cadence, known from its second sample."""
        t = self._raw()[0]
        return float(t[-1] - t[0]) / (t.size - 1) if t.size >= 2 else 0.0

    def append(self, t: float, value: float) -> float:
        """Store a sample (in base units: the source converted it); returns the value."""
        buf = self._buf
        sealed = self._chunks
        if sealed is None:  # a ring of exactly ``capacity`` samples
            h, cap = self._head, self._capacity
            buf[h], buf[cap + h] = t, value
            if self._n <= h:
                self._n = h + 1
            self._head = h + 1 if h + 1 < cap else 0
        else:
            n, size = self._n, len(buf) >> 1
            if n == size:  # the head grows as it fills (16, 32, 64): ~30 % less raw memory on average
                size, old = min(CHUNK, 2 * n), buf
                self._buf = buf = _ZERO * 2 * size
                buf[:n], buf[size: size + n] = old[:n], old[n:]
            buf[n], buf[size + n] = t, value
            n += 1
            if n == CHUNK:  # seal the head; drop the oldest chunk once the rest still holds ``capacity``
                sealed.append(chunks.encode(*np.frombuffer(buf).reshape(2, CHUNK)))
                self._tail = buf[CHUNK - TAIL: CHUNK].tobytes()  # for interval(), not to decode the chunk
                self._buf = _ZERO * 2 * HEAD_MIN
                n = 0
                blocks = self._blocks
                if self._capacity >= MERGE_FROM and (len(sealed) - blocks) * CHUNK == BLOCK:
                    block = chunks.encode(*chunks.decode_all(sealed[blocks:], CHUNK), level=6)
                    # one value no decimal exponent gives back makes the whole block XOR-coded: where that
                    # is larger than the chunks were, they stay (and so does every later chunk of this series)
                    if len(block) < sum(len(c) for c in sealed[blocks:]):
                        sealed[blocks:] = [block]
                        self._blocks = blocks = blocks + 1
                if self._sealed() - (BLOCK if blocks else CHUNK) >= self._capacity:
                    del sealed[0]
                    self._blocks = max(0, blocks - 1)
            self._n = n
        gap, age = t - self.last_t, self._long_gap_age + 1
        if (gap >= self._long_gap or age > LONG_GAP_SAMPLES) and -_INF < gap < _INF:  # finite: not the first
            self._long_gap, age = gap, 0
        self._long_gap_age = age
        self.last_t, self.last_v = t, value
        if t > self.seen:
            self.seen = t
        return value

    def window(self, since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
        """Samples with t >= since, oldest first (copies)."""
        t, v = self._raw()
        if self._chunks:
            old_t, old_v = self._decoded()
            keep = len(self)
            t = np.concatenate([old_t, t])[-keep:]
            v = np.concatenate([old_v, v])[-keep:]
        i = int(np.searchsorted(t, since, side="left"))
        return t[i:].copy(), v[i:].copy()

    def frozen(self) -> Frozen:
        """What ``window()`` returns now, read later: the sealed chunks are immutable bytes (only the list
        of them is copied) and the raw head (<= CHUNK samples) is copied, so nothing is decoded until a
        reader asks. A diagnosis' evidence is captured every few seconds while an alert fires, on every
        series it may read of every firing node: decoded at each capture, hours of history were
        re-decoded and held (16 B a sample) for the few series a procedure reads."""
        if not self._chunks:
            t, v = self.window()
            return Frozen([], 0, t.size, np.stack([t, v]))
        return Frozen(list(self._chunks), self._blocks, len(self), np.frombuffer(self._buf).reshape(2, -1)[:, : self._n].copy())

    def __len__(self) -> int:
        if self._chunks is None:
            return self._n
        return min(self._capacity, self._sealed() + self._n)

    def _sealed(self) -> int:
        """Samples in the sealed chunks and blocks."""
        assert self._chunks is not None
        return len(self._chunks) * CHUNK + self._blocks * (BLOCK - CHUNK)

    def _newest_sealed_times(self) -> np.ndarray:
        """The times of the newest sealed chunk, or block when the chunks were just merged: one decoded,
        not the whole history."""
        assert self._chunks is not None
        return chunks.decode(self._chunks[-1], BLOCK if len(self._chunks) == self._blocks else CHUNK)[0]

    def _decoded(self) -> tuple[np.ndarray, np.ndarray]:
        assert self._chunks is not None
        return _decode(self._chunks, self._blocks)


def _decode(blobs: list[bytes], blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples of ``blocks`` merged blocks followed by chunks, oldest first."""
    if not blocks:
        return chunks.decode_all(blobs, CHUNK)
    (bt, bv), (ct, cv) = chunks.decode_all(blobs[:blocks], BLOCK), chunks.decode_all(blobs[blocks:], CHUNK)
    return np.concatenate([bt, ct]), np.concatenate([bv, cv])


class Frozen:
    """A series' history as it was when frozen (``Series.frozen``): called, its samples; ``after(t)``, only
    those newer than ``t``, decoding at most the newest sealed chunk (the next evidence row of a firing
    node carries only what is new: ``alerting.evidence_log``)."""

    __slots__ = ("blobs", "blocks", "keep", "head")

    def __init__(self, blobs: list[bytes], blocks: int, keep: int, head: np.ndarray) -> None:
        self.blobs, self.blocks, self.keep, self.head = blobs, blocks, keep, head

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        head = self.head
        if not self.blobs:
            return head[0], head[1]
        old_t, old_v = _decode(self.blobs, self.blocks)
        keep = self.keep
        return np.concatenate([old_t, head[0]])[-keep:], np.concatenate([old_v, head[1]])[-keep:]

    def after(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        head = self.head
        if self.blobs and not (head.shape[1] and head[0, 0] <= t):
            newest = chunks.decode(self.blobs[-1], BLOCK if len(self.blobs) == self.blocks else CHUNK)
            if newest[0].size and newest[0][0] <= t:
                head = np.concatenate([np.stack(newest), head], axis=1)
            else:  # older than the newest chunk: the whole history
                head = np.stack(self())
        i = int(head[0].searchsorted(t, "right"))  # the method: np.searchsorted's dispatch was ~10 us of ~6 000 calls
        return head[0, i:].copy(), head[1, i:].copy()


@dataclass(frozen=True)
class StoreLimits:
    capacity: int = 4096           # samples per series: 5.7 h at 5 s
    max_series: int = 20000        # shared fairly by the sources (see SeriesStore)
    max_series_per_metric: int = 2000  # per source and metric name: a noisy exporter cannot use up the trainer's
    stale_after_s: float = 300.0   # Prometheus' lookback delta
    evict_after_s: float = 3600.0  # an unseen series is evicted after this (and stale_after, 3 own intervals)


class SeriesStore:
    """All series, bounded. New series beyond the caps are refused and counted by reason.

    Fair sharing, as Prometheus' per-target ``sample_limit`` does per scrape but over the whole store:
    each source may hold ``max_series / sources`` series once the store is full. A source under its share
    is always admitted: the oldest series of the source furthest over its share makes room (an
    exporter churning ``pod=<uuid>`` labels pays for its own churn, the trainer's new series gets in).
    ``evict_stale`` removes series not seen for the staleness period (the head GC), so the budget comes
    back. ``pinned`` series (an active alert or an absence detector depends on them) are never evicted."""

    def __init__(self, limits: StoreLimits | None = None,
                 on_drop: Callable[[str], None] | None = None,
                 on_evict: Callable[[Series], None] | None = None,
                 pinned: Callable[[Series], bool] | None = None,
                 history: Callable[[Series], int] | None = None) -> None:
        """``history``: the samples a new series' readers known at its creation need (the pipeline's
        diagnosis evidence); with it a series starts at ``UNREAD_HISTORY``, its rules reserve more
        (``Series.reserve``). Without it every series may hold ``capacity``."""
        self.limits = limits or StoreLimits()
        self._history = history
        self._series: dict[SeriesKey, Series] = {}
        # label set -> the one tuple of it the stored keys share (pruned to the live ones as series go)
        self._label_sets: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._per_metric: dict[tuple[str, str], int] = {}
        self._by_source: dict[str, dict[SeriesKey, Series]] = {}  # insertion order = age
        self._on_drop = on_drop or (lambda reason: None)
        self._on_evict = on_evict or (lambda series: None)
        self._pinned = pinned or (lambda series: False)
        self._next_id = 0
        self.dropped: dict[str, int] = {}
        self.dropped_by_source: dict[tuple[str, str], int] = {}  # (source, reason) -> new series refused
        self.evicted: dict[str, int] = {}  # reason -> series evicted

    def get_or_create(self, name: str, labels: dict[str, str], source: str = "") -> Series | None:
        key = series_key(name, labels)
        s = self._series.get(key)
        if s is not None:
            return s
        reason = None
        own = self._by_source.get(source)
        if self._per_metric.get((source, name), 0) >= self.limits.max_series_per_metric:
            reason = "max_series_per_metric"
        elif len(self._series) >= self.limits.max_series and not self._make_room(source, len(own or ())):
            reason = "max_series"
        if reason:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            self.dropped_by_source[(source, reason)] = self.dropped_by_source.get((source, reason), 0) + 1
            self._on_drop(reason)
            return None
        cap = self.limits.capacity
        key = (name, self._label_sets.setdefault(key[1], key[1]))
        s = Series(name, labels, cap if self._history is None else min(cap, UNREAD_HISTORY), self._next_id,
                   source, key)
        if self._history is not None:
            s.reserve(self.bounded(self._history(s)))
        self._next_id += 1
        self._series[key] = s
        self._by_source.setdefault(source, {})[key] = s
        self._per_metric[(source, name)] = self._per_metric.get((source, name), 0) + 1
        return s

    def bounded(self, samples: float) -> int:
        """A history a reader asks for, within ``limits.capacity``."""
        return int(min(self.limits.capacity, math.ceil(samples)))

    def fair_share(self, source: str) -> int:
        sources = len(self._by_source) + (source not in self._by_source)
        return max(1, self.limits.max_series // max(1, sources))

    def _make_room(self, source: str, held: int) -> bool:
        """Evict one series of the source furthest over its share, if ``source`` is under its own."""
        share = self.fair_share(source)
        if held >= share:
            return False
        hog = max(self._by_source, key=lambda k: len(self._by_source[k]), default=None)
        if hog is None or hog == source or len(self._by_source[hog]) <= share:
            return False
        for s in self._by_source[hog].values():  # oldest first; a bounded scan past pinned ones
            if not self._pinned(s):
                self._remove(s, "fair_share")
                return True
        return False

    def evict_stale(self, now: float, horizon: Callable[[Series], float] | None = None) -> int:
        """Remove series not seen for ``evict_after_s`` (at least ``stale_after_s``) nor for
        ``horizon(series)`` (a series' own longer freshness, e.g. 3 training steps); returns how many.
        An hour by default, not the 5-min lookback: a per-step series of a 6-min step has no known
        cadence before its 4th sample and must not be evicted between its first ones."""
        stale = max(self.limits.stale_after_s, self.limits.evict_after_s)
        gone = [s for s in self._series.values() if now - s.seen > stale
                and (horizon is None or now - s.seen > horizon(s)) and not self._pinned(s)]
        # A series too young to know its own cadence (under 4 samples) is judged by its source's: on a verl
        # log at ~1-h steps a key first written a few steps in could be evicted between its first samples,
        # and its detector's memory with it. Only the sources of such candidates are looked at. Young series
        # count with the gaps between their first samples: every per-step key of such a log is young together
        # (each late step evicted them all), so the source's mature series were only its 30-s liveness ones.
        cadence: dict[str, float] = {}
        for src in {s.source for s in gone if s.interval() == 0.0}:
            cadence[src] = max(x.interval() or x.first_gaps() for x in self._by_source[src].values())
        gone = [s for s in gone if s.source not in cadence or s.interval() > 0
                or now - s.seen > YOUNG_EVICT_INTERVALS * cadence[s.source]]
        for s in gone:
            self._remove(s, "stale")
        return len(gone)

    def _remove(self, s: Series, reason: str) -> None:
        del self._series[s.key]
        own = self._by_source[s.source]
        del own[s.key]
        if not own:
            del self._by_source[s.source]
        left = self._per_metric[(s.source, s.name)] - 1
        if left:
            self._per_metric[(s.source, s.name)] = left
        else:
            del self._per_metric[(s.source, s.name)]
        self.evicted[reason] = self.evicted.get(reason, 0) + 1
        if len(self._label_sets) > 2 * len(self._series) + 64:  # label sets no series has any more
            self._label_sets = {k[1]: k[1] for k in self._series}
        s.gone = True
        self._on_evict(s)

    def remove_source(self, source: str) -> int:
        """Remove all series of ``source`` (it left service discovery); returns how many."""
        gone = list(self._by_source.get(source, {}).values())
        for s in gone:
            self._remove(s, "target_removed")
        return len(gone)

    def held_by(self, source: str) -> int:
        return len(self._by_source.get(source, ()))

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[Series]:
        return iter(list(self._series.values()))

    def get(self, key: SeriesKey) -> Series | None:
        return self._series.get(key)

    def select(self, selector: Selector) -> list[Series]:
        return [s for s in self._series.values() if selector.matches(s.name, s.labels)]
