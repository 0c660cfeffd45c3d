"""A sealed chunk of history decodes to the exact float64 bits that went in, whatever the values."""

from __future__ import annotations

import numpy as np
import pytest

from monitor import chunks

T0 = 1_767_225_600.0
rng = np.random.default_rng(7)
N = 64

VALUES = {
    "decimal text": np.round(rng.uniform(0, 100, N), 4),
    "counter": 1.5e9 + 16.0 * np.arange(N),
    "random float bits": rng.standard_normal(N),
    "non-finite and signed zeros": np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1.7e308, -1.0] * 8),
    "tiny decimals": np.round(rng.uniform(0, 1e-6, N), 12),
    "beyond 2**53": 2.0 ** 60 + 2.0 ** 9 * np.arange(N),
    "trailing zeros": np.round(6e10 + np.cumsum(rng.uniform(-2e8, 2e8, N)), -5),  # %.6g of GPU bytes
    "negative multiples of 10**15": -1e15 * rng.integers(1, 9, N),
    "multiples of 10 near 2**53": 9.007e15 - 10.0 * np.arange(N),
}
TIMES = {
    "steady": T0 + 5.0 * np.arange(N),
    "jittered": T0 + np.cumsum(rng.uniform(4.9, 5.1, N)),
    "across magnitudes": np.concatenate([[0.0, 1e-300, 0.5], T0 + np.arange(N - 3)]),
    "unordered": rng.uniform(0, 2e9, N),
}


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("times", TIMES)
def test_a_chunk_decodes_bit_for_bit(values: str, times: str) -> None:
    t, v = TIMES[times], VALUES[values]
    t2, v2 = chunks.decode(chunks.encode(t, v), N)
    assert t2.tobytes() == t.tobytes() and v2.tobytes() == v.tobytes()


def test_scraped_values_at_a_steady_cadence_take_a_fraction_of_their_raw_size() -> None:
    walk = np.round(50.0 + np.cumsum(rng.uniform(-2, 2, N)), 4)  # monitor_scale.py's gauges: %.6g text
    assert len(chunks.encode(TIMES["steady"], walk)) < 16 * N / 4
    assert len(chunks.encode(TIMES["steady"], VALUES["counter"])) < 16 * N / 20


def test_integers_with_trailing_zeros_are_stored_without_them() -> None:
    gpu_bytes = VALUES["trailing zeros"]  # deltas up to 2e8, in steps of 1e5
    as_is = chunks.encode(TIMES["steady"], gpu_bytes + 1.0)  # the same walk, no trailing zero
    assert len(chunks.encode(TIMES["steady"], gpu_bytes)) < 0.7 * len(as_is)


def test_many_chunks_decode_at_once_as_each_alone() -> None:
    blobs = [chunks.encode(TIMES[t], VALUES[v]) for t in TIMES for v in VALUES]
    fast = [chunks.encode(TIMES["jittered"] + 400.0 * i, VALUES["decimal text"] * i) for i in range(5)]
    fast += [chunks.encode(TIMES["steady"], VALUES[v]) for v in ("trailing zeros", "counter", "trailing zeros")]
    for group in (blobs, fast, fast[:1], []):
        t, v = chunks.decode_all(group, N)
        want = [chunks.decode(b, N) for b in group]
        assert t.tobytes() == b"".join(w[0].tobytes() for w in want)
        assert v.tobytes() == b"".join(w[1].tobytes() for w in want)
