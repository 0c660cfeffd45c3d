"""Statistics over prompt embeddings (unit vectors from ``verl.data.embeddings``).

- ``mean_pairwise_distance``: the semantic ``verl_prompt_diversity``. Mean cosine distance over all
  pairs of the sampled prompts, not a BERTScore-style greedy token matching: all-MiniLM-L6-v2 is trained
  contrastively so that its *sentence* vectors are close for paraphrases (its token vectors carry no
  such promise); all pairs come out of one n×d matrix in O(n·d) (BERTScore needs token-level matching
  per pair, O(pairs × tokens²), so only a few sampled pairs per report, and noisier); and it is the
  measure the metric's help text promises (mean pairwise cosine distance). 0 = every prompt says the same thing, ~0.9 = unrelated questions.
- ``mmd_permutation_pvalue``: the ``verl_prompt_shift_pvalue``. Maximum mean discrepancy between the
  reference and the recent window, RBF kernel at the median-distance bandwidth, with a permutation
  p-value. Chosen over per-projection KS tests: MMD is one test over the whole 384-d distribution
  (no multiple-testing correction over projections), and the permutation null is exact for any window
  size. scipy has no multivariate two-sample test, hence these few lines.
"""

from __future__ import annotations

import numpy as np

PERMUTATIONS = 1999  # smallest attainable p = 1/2000, under the alert's 0.001


def mean_pairwise_distance(vectors: np.ndarray) -> float:
    """Mean of ``1 - cos`` over all pairs of the rows (unit vectors); 0.0 for fewer than two rows."""
    n = len(vectors)
    if n < 2:
        return 0.0
    v = vectors.astype(np.float64)
    total = v.sum(axis=0)
    off_diagonal = float(total @ total) - float((v * v).sum())  # sum of cos over ordered pairs i != j
    return float(min(2.0, max(0.0, 1.0 - off_diagonal / (n * (n - 1)))))


def mmd_permutation_pvalue(reference: np.ndarray, recent: np.ndarray, permutations: int = PERMUTATIONS,
                           seed: int = 0) -> float:
    """p-value of "both windows come from one distribution" (small = the prompts moved). Seeded, so a
    report is reproducible from its windows."""
    pooled = np.concatenate([reference, recent]).astype(np.float64)
    n, m = len(reference), len(recent)
    sq = np.maximum(0.0, 2.0 - 2.0 * (pooled @ pooled.T))  # squared distances of unit vectors
    bandwidth = float(np.median(sq[np.triu_indices(n + m, 1)]))
    kernel = np.exp(-sq / max(bandwidth, 1e-12))
    rng = np.random.default_rng(seed)
    signs = np.empty((n + m, permutations + 1))
    base = np.concatenate([np.full(n, 1.0 / n), np.full(m, -1.0 / m)])
    signs[:, 0] = base  # the observed split
    for b in range(1, permutations + 1):
        signs[:, b] = rng.permutation(base)
    # biased MMD² of each split at once: s^T K s, with s = +1/n on one side and -1/m on the other
    stats = np.einsum("ib,ib->b", signs, kernel @ signs)
    return float((1 + np.sum(stats[1:] >= stats[0] - 1e-12)) / (permutations + 1))
