"""A sealed chunk of history decodes to the exact float64 bits that went in, whatever the values."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest

from monitor.series import chunks

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


def _decimals_one_at_a_time(v: np.ndarray) -> int | None:
    """The definition ``chunks._decimals`` computes for all exponents at once (the encoder's loop before it)."""
    if not np.all(np.isfinite(v)) or np.any(np.signbit(v) & (v == 0)):
        return None
    for k in range(chunks._MAX_DECIMALS + 1):
        m = np.round(v * 10.0 ** k)
        if np.all(np.abs(m) < 2.0 ** 53) and np.array_equal(m / 10.0 ** k, v):
            return k
        if np.any(np.abs(m) >= 2.0 ** 53):
            return None
    return None


def _trailing_zeros_one_at_a_time(m: np.ndarray) -> int:
    j = 0
    while j < chunks._MAX_TENS and np.any(m) and not np.any(m % 10 ** (j + 1)):
        j += 1
    return j


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1.7e308, -1.0, 2.0 ** 53, 2.0 ** 53 - 1, 1e296,
                     1e-300, 0.5, 2.5, -2.5, 1e15, 9.007e15, 1.0 - 2.0 ** -53])


def _fuzz_values(r: np.random.Generator, n: int) -> np.ndarray:
    kind = r.integers(0, 7)
    if kind == 0:  # decimal text of any precision
        return np.round(r.uniform(-1, 1, n) * 10.0 ** r.integers(-12, 20), int(r.integers(-16, 16)))
    if kind == 1:
        return r.choice(SPECIALS, n)
    if kind == 2:  # integers with trailing zeros
        return r.integers(-10, 10, n) * 10.0 ** r.integers(0, 17)
    if kind == 3:  # any float64 bits, signalling NaNs included
        return r.integers(-2 ** 62, 2 ** 62, n).view(np.float64).copy()
    if kind == 4:
        return r.standard_normal(n) * 10.0 ** r.integers(-300, 300)
    v = np.round(r.uniform(0, 100, n), 4)
    v[r.integers(0, n)] = r.choice(SPECIALS)
    return v


def test_every_exponent_at_once_finds_what_one_at_a_time_did() -> None:
    """``_decimals`` tries the 13 exponents in one (13, n) array and ``_trailing_zeros`` reads a gcd: the same
    answers as the loops they replace, on values of every kind (and no numpy warning: overflow is expected)."""
    r = np.random.default_rng(46)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3000):
            v = _fuzz_values(r, int(r.choice([1, 2, 64, 512])))
            with np.errstate(all="ignore"):
                want = _decimals_one_at_a_time(v)
            found = chunks._decimals(v)
            assert (found[0] if found else None) == want, v
            if found:
                assert np.array_equal(found[1], np.round(v * 10.0 ** found[0]))
                m = found[1].astype(np.int64)
                assert chunks._trailing_zeros(m) == _trailing_zeros_one_at_a_time(m), m


def test_fuzzed_chunks_decode_bit_for_bit() -> None:
    r = np.random.default_rng(64)
    times = [lambda n: T0 + 5.0 * np.arange(n), lambda n: T0 + np.cumsum(r.uniform(4.9, 5.1, n)),
             lambda n: r.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64, endpoint=True).view(np.float64).copy(),
             lambda n: r.choice(SPECIALS, n)]
    for _ in range(1500):
        n = int(r.choice([2, 3, 64, 512]))
        t, v = times[r.integers(0, len(times))](n), _fuzz_values(r, n)
        t2, v2 = chunks.decode(chunks.encode(t, v), n)
        assert t2.tobytes() == t.tobytes() and v2.tobytes() == v.tobytes()


def test_the_encoding_is_byte_for_byte_the_previous_one() -> None:
    """A chunk sealed today reads as one sealed before (and the other way): the SHA-256 of every chunk of
    ``test_a_chunk_decodes_bit_for_bit`` as the one-exponent-at-a-time encoder wrote them."""
    blobs = b"".join(chunks.encode(TIMES[t], VALUES[v]) for t in TIMES for v in VALUES)
    assert hashlib.sha256(blobs).hexdigest() == "3560a09edc0631c41f4339659908c80f2e9d280da1e2122e00385413be59e628"
