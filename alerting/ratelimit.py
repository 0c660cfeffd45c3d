"""Per-robot send budget. DingTalk and WeCom robots accept 20 messages per minute; DingTalk then
throttles the robot for 10 minutes. We keep a sliding-window log of send times instead of a token
bucket: a bucket of 20 refilling at 20/min lets up to 40 messages into one 60 s window, which the robot
would reject. Windows are tracked on the injected clock and persisted across restarts."""

from __future__ import annotations

from collections import deque
from typing import Any


class RobotLimiter:
    def __init__(self, limits: list[tuple[int, float]], throttle_s: float = 60.0) -> None:
        self.limits = limits  # (messages, window seconds)
        self.throttle_s = throttle_s  # how long the robot blocks us after an overrun
        self.sent: deque[float] = deque()
        self.blocked_until = 0.0

    def _trim(self, now: float) -> None:
        horizon = max((w for _, w in self.limits), default=0.0)
        while self.sent and self.sent[0] <= now - horizon:
            self.sent.popleft()

    def available(self, now: float) -> int:
        if now < self.blocked_until:
            return 0
        self._trim(now)
        return min((n - sum(1 for t in self.sent if t > now - w) for n, w in self.limits), default=1 << 30)

    def spend(self, now: float, n: int = 1) -> None:
        self.sent.extend([now] * n)

    def overrun(self, now: float) -> float:
        """The robot said 'too fast': stop sending until its throttle ends."""
        self.blocked_until = max(self.blocked_until, now + self.throttle_s)
        return self.blocked_until

    def next_free(self, now: float) -> float:
        """Earliest time at which one more message fits."""
        if now < self.blocked_until:
            return self.blocked_until
        t = now
        for n, w in self.limits:
            inside = [s for s in self.sent if s > now - w]
            if len(inside) >= n:
                t = max(t, inside[len(inside) - n] + w)
        return t

    def to_state(self) -> dict[str, Any]:
        return {"sent": list(self.sent), "blocked_until": self.blocked_until}

    def load_state(self, state: dict[str, Any]) -> None:
        self.sent = deque(sorted(float(t) for t in state.get("sent", [])))
        self.blocked_until = float(state.get("blocked_until", 0.0))
