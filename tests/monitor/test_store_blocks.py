"""A long history's older chunks merged into blocks: every read gives what an uncompressed ring of the
same capacity would, and the merged history takes fewer bytes."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np

from monitor.series.store import BLOCK, CHUNK, MERGE_FROM, Series


def _samples(n: int, seed: int, odd_every: int = 0) -> list[tuple[float, float]]:
    """A jittered 5-s gauge of 6-digit decimals; every ``odd_every``-th value one no decimal gives back."""
    rng = random.Random(seed)
    v, out = 50.0, []
    for i in range(n):
        v = min(75.0, max(30.0, v + rng.uniform(-0.9, 0.9)))
        odd = odd_every and i % odd_every == odd_every - 1
        out.append((1.7e9 + 5.0 * i + rng.uniform(0, 0.02), math.pi * i if odd else float(f"{v:.6g}")))
    return out


def test_merged_history_reads_as_the_last_capacity_samples() -> None:
    for capacity, odd_every in ((MERGE_FROM, 0), (4096, 0), (4000, 0), (4096, 997)):
        data = _samples(3 * capacity + 2 * BLOCK + 17, capacity, odd_every)
        s = Series("x", {}, capacity, 0)
        checked = 0
        for k, (t, v) in enumerate(data, 1):
            s.append(t, v)
            if k % 389 == 0 or k == len(data):
                want = np.array(data[max(0, k - capacity): k])
                got_t, got_v = s.window()
                assert len(s) == min(k, capacity) == got_t.size, (capacity, k)
                assert np.array_equal(got_t, want[:, 0]) and np.array_equal(got_v, want[:, 1]), (capacity, k)
                ft, fv = s.frozen()()
                assert np.array_equal(ft, got_t) and np.array_equal(fv, got_v)
                gaps = sorted(np.diff(want[-17:, 0]).tolist())
                assert s.interval() == (gaps[7] + gaps[8]) / 2
                checked += 1
        assert checked > 10
        # merged, and read back merged; a block an odd value would make larger stays chunks
        assert (s._blocks > 0) == (odd_every == 0)  # noqa: SLF001


def test_merged_blocks_take_fewer_bytes_than_chunks() -> None:
    """Per sample held, and in all: the oldest block goes whole, yet a full history is smaller."""
    data = _samples(3 * 4096, 7)
    merged, plain = Series("x", {}, 4096, 0), Series("x", {}, MERGE_FROM - CHUNK, 1)
    for t, v in data:
        merged.append(t, v)
        plain.append(t, v)

    def nbytes(s: Series) -> int:
        return sum(len(b) + 41 for b in s._chunks)  # noqa: SLF001 - bytes + object header and list slot
    per_merged = nbytes(merged) / merged._sealed()  # noqa: SLF001
    per_plain = nbytes(plain) / plain._sealed()  # noqa: SLF001
    assert per_merged < 0.85 * per_plain
    assert nbytes(merged) < 4096 / plain._sealed() * nbytes(plain)  # noqa: SLF001 - the overshoot included


def test_interval_over_more_gaps_than_the_kept_tail_reads_the_newest_block() -> None:
    """Right after the chunks were merged, the newest sealed piece is a block of BLOCK samples: an
    interval over more gaps than the raw tail keeps reads it as one."""
    data = _samples(BLOCK + 5, 11)
    s = Series("x", {}, 4096, 0)
    for t, v in data:
        s.append(t, v)
    assert s._blocks == 1 and len(s._chunks) == 1  # noqa: SLF001 - the merge just happened
    gaps = sorted(np.diff(np.array(data)[-41:, 0]).tolist())
    assert s.interval(40) == (gaps[19] + gaps[20]) / 2


def test_sealed_history_is_byte_for_byte_the_previous_one() -> None:
    """The head (an ``array.array`` since numpy's scalar stores cost ~70 ns a sample) seals the same chunks
    and blocks as before, and reads back the same samples: the SHA-256 of a ring's, a chunked history's,
    a merged one's and one with values no decimal gives back, as the numpy (2, n) head wrote them."""
    rng, h = random.Random(3), hashlib.sha256()
    for capacity, odd in ((17, 0), (200, 0), (MERGE_FROM, 0), (4096, 97)):
        s, v = Series("x", {}, capacity, 0), 50.0
        for i in range(3000):
            v = min(75.0, max(30.0, v + rng.uniform(-0.9, 0.9)))
            s.append(1.7e9 + 5.0 * i + rng.uniform(0, 0.02), math.pi * i if odd and i % odd == 0 else float(f"{v:.6g}"))
        for b in s._chunks or []:  # noqa: SLF001
            h.update(b)
        for a in s.window():
            h.update(a.tobytes())
    assert h.hexdigest() == "3bd7f8219d51bff03a160f1a1d00a83cc905bc4106b244bc9cf8e8df5052590a"
