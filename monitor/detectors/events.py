"""Event-style detectors over counters and windows: increases, relative drops."""

from __future__ import annotations

from collections import deque

from monitor.detectors.base import Detector, Finding


class CounterIncreaseDetector(Detector):
    """A counter rose by at least ``min_increase`` within ``window`` seconds (resets handled like
    PromQL's ``increase``: a drop means the process restarted and counts from zero).

    Tested by tests/monitor/test_monitor_detectors.py::test_counter_increase_and_reset.
    """

    __slots__ = ("window_s", "min_increase", "_incs", "_last")

    def __init__(self, window: float = 300.0, min_increase: float = 1.0) -> None:
        self.window_s, self.min_increase = window, min_increase
        # made at the first increase: most counters bound here (Xid, NVLink, OOM errors) never rise, and an
        # empty deque is ~600 B (at 1000 GPUs ~26 000 of them were ~16 MB of the monitor's RSS)
        self._incs: deque[tuple[float, float]] | None = None
        self._last: float | None = None

    def update(self, t: float, value: float) -> Finding:
        if self._last is not None:
            inc = value - self._last if value >= self._last else value
            if inc > 0:
                if self._incs is None:
                    self._incs = deque()
                self._incs.append((t, inc))
        self._last = value
        incs = self._incs
        while incs and incs[0][0] <= t - self.window_s:
            incs.popleft()
        total = sum(i for _, i in incs) if incs else 0
        hit = total >= self.min_increase
        return Finding(t, hit, 1.0 if hit else 0.0, {"increase": total, "value": total})

    def quiet(self, t: float, value: float) -> bool:
        # an error counter that stays put (most of the ~13 000 bound at 1000 GPUs): no increase to add,
        # none in the window to expire, a total of 0 below a positive minimum -- ``update`` would only
        # make an inactive Finding and its details dict (NaN never equals: it takes ``update``)
        return value == self._last and not self._incs and self.min_increase > 0

    def reset(self) -> None:
        self._incs = None
        self._last = None


class WindowDropDetector(Detector):
    """The value fell by at least ``min_relative_drop`` below its maximum of the last ``window`` s.

    For "rollout buffer lost >= 50 % within minutes". Tested by test_monitor_detectors.py::test_window_drop.
    """

    def __init__(self, window: float = 300.0, min_relative_drop: float = 0.5, min_peak: float = 1.0) -> None:
        self.window_s, self.min_drop, self.min_peak = window, min_relative_drop, min_peak
        self._buf: deque[tuple[float, float]] = deque()

    def update(self, t: float, value: float) -> Finding:
        self._buf.append((t, value))
        while self._buf and self._buf[0][0] < t - self.window_s:
            self._buf.popleft()
        peak = max(v for _, v in self._buf)
        if peak < self.min_peak:
            return Finding(t, False)
        drop = (peak - value) / peak
        hit = drop >= self.min_drop
        return Finding(t, hit, min(1.0, drop), {"relative_drop": drop, "peak": peak, "value": value})

    def reset(self) -> None:
        self._buf.clear()


class CounterStallDetector(Detector):
    """A counter has not risen for ``window`` seconds (a reset counts as movement: the process restarted).

    For "a rollout server holds requests but generates no tokens": the stall rule joins it with the
    server's running/waiting requests (``when:``), so an idle server, whose counter is flat too, is quiet.
    Tested by tests/monitor/test_rollout_servers.py.
    """

    def __init__(self, window: float = 90.0) -> None:
        self.window_s = window
        self._last: float | None = None
        self._since = 0.0  # when it last moved (or was first seen)

    def update(self, t: float, value: float) -> Finding:
        if self._last is None or value != self._last:
            self._since = t
        self._last = value
        flat = t - self._since
        hit = flat >= self.window_s
        return Finding(t, hit, 1.0 if hit else 0.0, {"stalled_s": flat, "value": flat})

    def reset(self) -> None:
        self._last = None
