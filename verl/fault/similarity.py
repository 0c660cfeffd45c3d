"""Prompt similarity shared by the reward cache and the prompt guards: MinHash signatures (datasketch)
over character 4-gram shingles of normalised text, so short prompts still get enough shingles."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from datasketch import MinHash

NUM_PERM = 64
SHINGLE = 4
_WS = re.compile(r"\s+")


def shingles(text: str, k: int = SHINGLE) -> list[bytes]:
    norm = _WS.sub(" ", text.lower()).strip()
    if len(norm) <= k:
        return [norm.encode("utf-8", "surrogatepass")]
    return [norm[i : i + k].encode("utf-8", "surrogatepass") for i in range(len(norm) - k + 1)]


def minhashes(texts: Sequence[str], num_perm: int = NUM_PERM) -> list[MinHash]:
    """One signature per text; ``bulk`` shares the permutation tables across the batch."""
    if not texts:
        return []
    return list(MinHash.bulk([shingles(t) for t in texts], num_perm=num_perm))


def signatures(texts: Sequence[str], num_perm: int = NUM_PERM) -> np.ndarray:
    """``len(texts) × num_perm`` hash values, for vectorised Jaccard estimates."""
    if not texts:
        return np.zeros((0, num_perm), dtype=np.uint64)
    return np.stack([m.hashvalues for m in minhashes(texts, num_perm)])
