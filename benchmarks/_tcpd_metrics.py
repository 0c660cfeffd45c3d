"""TCPDBench's evaluation metrics (van den Burg & Williams 2020, §4), reimplemented from the paper.

Change points are 0-based indices where a new segment starts. Index 0 is added to every annotator's
set and to the predictions (the series start is trivially a change), as in the paper.

- F1: precision P = |TP(union of annotations, X)| / |X|, recall R = mean over annotators k of
  |TP(T_k, X)| / |T_k|, F1 = 2PR / (P + R); TP(T, X) matches each true point to its nearest unused
  prediction within ``margin`` (5) rows, so one prediction never counts twice.
- Cover: C(S', S) = 1/T · Σ_{A ∈ S} |A| · max_{A' ∈ S'} J(A, A') (J = Jaccard index of the two
  segments), S an annotator's segmentation, S' the predicted one; averaged over annotators.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import pairwise


def true_positives(truth: Iterable[int], predicted: Iterable[int], margin: int = 5) -> set[int]:
    unused = set(predicted)
    hits: set[int] = set()
    for tau in sorted(truth):
        close = sorted((abs(tau - x), x) for x in unused if abs(tau - x) <= margin)
        if close:
            hits.add(tau)
            unused.remove(close[0][1])
    return hits


def f_measure(annotations: Mapping[str, Iterable[int]], predicted: Iterable[int], margin: int = 5) -> float:
    truths = [set(a) | {0} for a in annotations.values()]
    x = set(predicted) | {0}
    union = set().union(*truths)
    precision = len(true_positives(union, x, margin)) / len(x)
    recall = sum(len(true_positives(t, x, margin)) / len(t) for t in truths) / len(truths)
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def segments(change_points: Iterable[int], n: int) -> list[range]:
    bounds = sorted({c for c in change_points if 0 < c < n} | {0, n})
    return [range(a, b) for a, b in pairwise(bounds)]


def _jaccard(a: range, b: range) -> float:
    inter = max(0, min(a.stop, b.stop) - max(a.start, b.start))
    return inter / (len(a) + len(b) - inter)


def cover_single(predicted: list[range], truth: list[range]) -> float:
    n = sum(len(s) for s in truth)
    return sum(len(a) * max(_jaccard(a, b) for b in predicted) for a in truth) / n


def covering(annotations: Mapping[str, Iterable[int]], predicted: Iterable[int], n: int) -> float:
    pred = segments(predicted, n)
    covers = [cover_single(pred, segments(a, n)) for a in annotations.values()]
    return sum(covers) / len(covers)
