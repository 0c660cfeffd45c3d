"""Evidence captured where the data is: copies of the series the diagnosis procedures read
(``alerting.sink.DiagnosisNeeds.series_read``, handed in as data) on the nodes of the firing alerts, the NaN/Inf sample times
the pipeline refused, and each node's ``verl_config_info`` labels, as an ``alerting.evidence.Evidence``
that the alert book writes into the transition log with the alerts. Alerting never reads the store."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from alerting.evidence import Evidence, NonFiniteTimes, SeriesWindow
from monitor.series.store import Series, SeriesKey, SeriesStore

NONFINITE_KEPT = 256    # NaN/Inf sample times remembered per series
# Evidence series the procedures read only at their newest sample (``latest``/``readings``): the per-GPU
# ones, ~4 per GPU, and the rollout backlog's buffer age and live workers (``rollout_backlog`` asks for
# their latest values only). The others keep the whole ring: ``held_since`` reads all of it ("kl_coef = 0 since
# step 1200"), the look-backs read 10-30 min before an alert that may have fired hours ago.
# tests/monitor/test_store_history.py runs every procedure and fails if one reads more of these.
NEWEST_ONLY = frozenset({"verl_gpu_memory_total_bytes", "verl_gpu_memory_used_bytes",
                         "verl_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL",
                         "verl_rollout_buffer_age_seconds", "verl_rollout_workers_alive"})


def _node(s: Series) -> str:
    """The node the evaluator puts on this series' alerts (sources resolve it into the ``node`` label)."""
    return s.labels.get("node", "unknown")


class NonFiniteLog:
    """Times of the NaN/Inf samples the pipeline refused, per series (the store never keeps them, yet
    "reward mean is NaN" is evidence)."""

    def __init__(self) -> None:
        self.times: dict[SeriesKey, deque[float]] = {}
        self.series: dict[SeriesKey, Series] = {}

    def add(self, series: Series, t: float) -> None:
        self.series[series.key] = series
        self.times.setdefault(series.key, deque(maxlen=NONFINITE_KEPT)).append(t)


class FrozenWindow(SeriesWindow):
    """A ``SeriesWindow`` of the samples a series held at the capture, decoded when a procedure first reads
    ``t`` or ``v`` (``Series.frozen``): a capture copies no history, and the windows no procedure reads are
    never decoded; the next evidence row takes only its samples newer than the last row's (``after``)."""

    def __init__(self, s: Series) -> None:
        object.__setattr__(self, "name", s.name)  # a frozen dataclass' fields: set as its own __init__ does
        object.__setattr__(self, "labels", s.labels)  # a copy
        object.__setattr__(self, "_read", s.frozen())
        object.__setattr__(self, "_lineage", (s.id, len(s)))
        object.__setattr__(self, "_tv", None)

    def _decoded(self) -> tuple[np.ndarray, np.ndarray]:
        tv = self.__dict__["_tv"]
        if tv is None:  # two readers at once both decode the same samples: either result is kept
            tv = self._read()
            object.__setattr__(self, "_tv", tv)
        return tv

    @property  # type: ignore[override]
    def t(self) -> np.ndarray:
        return self._decoded()[0]

    @property  # type: ignore[override]
    def v(self) -> np.ndarray:
        return self._decoded()[1]

    def lineage(self) -> tuple[int, int] | None:
        return self._lineage

    def after(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        if self.__dict__["_tv"] is not None:
            return super().after(t)
        return self._read.after(t)


class EvidenceCapture:
    """Copies what the procedures read out of the store, for the nodes asked (all when ``None``)."""

    def __init__(self, store: SeriesStore, nonfinite: NonFiniteLog | None, names: Iterable[str]) -> None:
        self.store = store
        self.nonfinite_log = nonfinite or NonFiniteLog()
        self.names = frozenset(names)
        self._by_name: dict[str, list[Series]] = {}
        self._indexed = -1

    def history(self, s: Series) -> int:
        """Samples of ``s`` the diagnosis reads (its whole ring, or none beyond the newest)."""
        return self.store.limits.capacity if s.name in self.names and s.name not in NEWEST_ONLY else 0

    def _series(self, name: str) -> list[Series]:
        if len(self.store) != self._indexed:  # re-index when the count moved (series come and are evicted)
            self._by_name = {}
            for s in self.store:
                if s.name in self.names:
                    self._by_name.setdefault(s.name, []).append(s)
            self._indexed = len(self.store)
        return self._by_name.get(name, [])

    def capture(self, now: float, nodes: set[str] | None,
                config: dict[str, dict[str, str]] | None = None) -> Evidence:
        windows = []
        for name in sorted(self.names) if nodes is None or nodes else ():  # no diagnosable alert: config only
            for s in self._series(name):
                if len(s) and not s.gone and (nodes is None or _node(s) in nodes):
                    windows.append(FrozenWindow(s))
        log = self.nonfinite_log
        bad = tuple(NonFiniteTimes(s.name, s.labels, tuple(log.times[k]))
                    for k, s in log.series.items() if nodes is None or _node(s) in nodes)
        return Evidence(now, tuple(windows), bad, {n: dict(i) for n, i in (config or {}).items()})
