"""Lossless compression of one sealed chunk of a series' history (times and values, float64 each).

The layout is VictoriaMetrics' (lib/encoding): a value block that came from decimal text (every scraped
value did: ``73.1234``, ``1.5e9``) is stored as integer mantissas with one decimal exponent, delta-coded
and zig-zagged; times are delta-of-delta coded on their float64 bit patterns (a steady scrape gives
zeros); both are byte-shuffled (blosc's filter: the high bytes of small integers line up in runs) and
deflated. Integers with trailing zeros (``6.01234e+10`` bytes, a ``%.6g`` exporter's large values) keep their
mantissa without them and a positive exponent, as VictoriaMetrics does: deltas of ~12 bits, not ~28. Decoding returns the exact float64 bits that went in: plots and diagnoses read the same
numbers as before, and no detector reads the store. A block no decimal exponent reproduces exactly
(a computed ratio, NaN) falls back to XOR with the previous value's bits (Gorilla's idea) before the shuffle.

No library fits: the time-series codecs on PyPI are either lossy (float32, fpzip/zfp with a tolerance),
bit-level Gorilla streams in pure Python (~10 us a sample), or bring a C toolchain (blosc2, numcodecs)
for what numpy and zlib do here in ~30 us a chunk.
"""

from __future__ import annotations

import zlib

import numpy as np

_XOR = 255  # exponent byte of a value block kept as XOR'd float64 bits
_MAX_DECIMALS = 12
_TENS = 100  # exponent byte 100 + j: integer values, all multiples of 10**j, stored divided by it (j <= _MAX_TENS)
_MAX_TENS = 15
_POW10 = 10.0 ** np.arange(_MAX_TENS + 1)
_ZIGZAG_MAX = 2 ** 62
_EXACT = 2.0 ** 53  # mantissas beyond this are not integers a float64 holds exactly
_COLUMN = _POW10[: _MAX_DECIMALS + 1, None]
_NEG_ZERO = np.int64(-(2 ** 63))  # the bits of -0.0


def _zigzag(d: np.ndarray) -> np.ndarray:
    return (d << 1) ^ (d >> 63)


def _unzigzag(z: np.ndarray) -> np.ndarray:
    return (z >> 1) ^ -(z & 1)


def _shuffle(a: np.ndarray) -> bytes:
    return a.view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(b: bytes, n: int) -> np.ndarray:
    return np.frombuffer(b, np.uint8).reshape(8, n).T.copy().view(np.int64).ravel()


def _decimals(v: np.ndarray) -> tuple[int, np.ndarray] | None:
    """The fewest decimals that give every value back exactly from an integer mantissa, if any, with the
    mantissas (float64). Every exponent is tried at once, a (13, n) array: ~8 numpy calls a chunk where one
    exponent at a time took ~6 per exponent tried (62 us a chunk of the 1000-GPU load against ~20)."""
    if (v.view(np.int64) == _NEG_ZERO).any():  # -0.0 keeps its bits (NaN and inf fail every exponent below)
        return None
    # |v| > 1e296 overflows at large exponents, a signalling NaN is invalid: k=0 refuses both already
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.rint(v * _COLUMN)  # rint: round half to even, as np.round
        over = (np.abs(m) >= _EXACT).any(axis=1)  # beyond it no larger exponent is tried
        good = ~over & (m / _COLUMN == v).all(axis=1)
    first = int(np.argmax(good | over))
    return (first, m[first]) if good[first] else None


def _trailing_zeros(m: np.ndarray) -> int:
    """The largest j <= _MAX_TENS with every integer of ``m`` a multiple of 10**j (0 for all zeros: nothing to
    gain): those of their greatest common divisor, one numpy call (15 rows of ``m % 10**j`` took ~15 us)."""
    g = int(np.gcd.reduce(m))  # 0: all zeros
    j = 0
    while g and j < _MAX_TENS and g % 10 ** (j + 1) == 0:
        j += 1
    return j


def _scaled(mantissas: np.ndarray, exp: np.ndarray | int) -> np.ndarray:
    """Values from integer mantissas: divided by 10**exp (decimals), or times 10**(exp - _TENS)."""
    e = np.asarray(exp)
    if not np.any(e >= _TENS):
        return mantissas / _POW10[e] if e.ndim == 0 else mantissas / _POW10[e][:, None]
    tens = np.where(e >= _TENS, e - _TENS, 0)
    den, mul = np.where(e >= _TENS, 1.0, _POW10[np.minimum(e, _MAX_DECIMALS)]), _POW10[tens]
    return (mantissas / den * mul) if e.ndim == 0 else mantissas / den[:, None] * mul[:, None]


def encode(t: np.ndarray, v: np.ndarray, level: int = 1) -> bytes:
    """One chunk: ``t`` and ``v`` float64 of the same length; ``level``: deflate's (a merged block, sealed
    once per BLOCK samples, affords more than a chunk)."""
    n = t.size
    bits = t.view(np.int64)
    # np.diff(np.diff(bits), prepend=0) in int64, wrapping alike: ~3 us where diff's prepend (a concatenate) took ~25
    dd = np.empty(max(0, n - 1), np.int64)
    if n > 1:
        d = bits[1:] - bits[:-1]
        dd[0] = d[0]
        np.subtract(d[1:], d[:-1], out=dd[1:])  # the first time goes raw: its bits use all 63
    if n > 1 and (dd.max() >= _ZIGZAG_MAX or dd.min() < -_ZIGZAG_MAX):  # times across magnitudes: zig-zag
        raw_times, times = 1, t.tobytes()                                # would lose a bit
    else:
        raw_times, times = 0, t[:1].tobytes() + _shuffle(_zigzag(dd))
    found = _decimals(v)
    if found is None:
        vb = v.view(np.int64)
        code = vb.copy()
        code[1:] ^= vb[:-1]
        exp = _XOR
    else:
        exp, mf = found
        m = mf.astype(np.int64)
        if exp == 0:
            j = _trailing_zeros(m)
            if j and np.array_equal((m // 10 ** j) * _POW10[j], v):  # exact by construction; checked all the same
                m, exp = m // 10 ** j, _TENS + j
        code = np.empty(n, np.int64)  # np.diff(m, prepend=0)
        code[:1] = m[:1]
        np.subtract(m[1:], m[:-1], out=code[1:])
        code = _zigzag(code)
    return bytes((exp, raw_times)) + zlib.compress(times + _shuffle(code), level)


def decode(blob: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` (times, values) ``encode`` was given, bit for bit."""
    exp = blob[0]
    raw = zlib.decompress(blob[2:])
    if blob[1]:
        t = np.frombuffer(raw[: 8 * n], np.float64).copy()
    else:
        bits = np.empty(n, np.int64)
        bits[0] = np.frombuffer(raw[:8], np.int64)[0]
        bits[1:] = bits[0] + np.cumsum(np.cumsum(_unzigzag(_unshuffle(raw[8: 8 * n], n - 1))))
        t = bits.view(np.float64)
    code = _unshuffle(raw[8 * n:], n)
    if exp == _XOR:
        v = np.bitwise_xor.accumulate(code).view(np.float64)
    else:
        v = _scaled(np.cumsum(_unzigzag(code)), exp)
    return t, v


def decode_all(blobs: list[bytes], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' samples, oldest first: what ``decode`` gives for each, concatenated, in one pass of
    numpy over all of them (a diagnosis reads a whole 4096-sample history at each alert transition)."""
    if not blobs:
        return np.empty(0), np.empty(0)
    if any(b[1] or b[0] == _XOR for b in blobs):  # rare layouts: one at a time
        parts = [decode(b, n) for b in blobs]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    k = len(blobs)
    raw = np.frombuffer(b"".join([zlib.decompress(b[2:]) for b in blobs]), np.uint8).reshape(k, 16 * n)
    first = raw[:, :8].copy().view(np.int64)  # (k, 1)
    dd = _unzigzag(raw[:, 8: 8 * n].reshape(k, 8, n - 1).transpose(0, 2, 1).copy().view(np.int64)[..., 0])
    bits = np.empty((k, n), np.int64)
    bits[:, :1] = first
    bits[:, 1:] = first + np.cumsum(np.cumsum(dd, axis=1), axis=1)
    code = _unzigzag(raw[:, 8 * n:].reshape(k, 8, n).transpose(0, 2, 1).copy().view(np.int64)[..., 0])
    exps = np.frombuffer(bytes(b[0] for b in blobs), np.uint8)
    v = _scaled(np.cumsum(code, axis=1), exps.astype(np.int64))
    return bits.view(np.float64).ravel(), v.ravel()
