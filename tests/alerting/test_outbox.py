from __future__ import annotations

from pathlib import Path

from alerting.config import OutboxConfig
from alerting.model import Notification
from alerting.outbox import Outbox
from alerting.ratelimit import RobotLimiter
from alerting.store import open_db
from tests.alerting.helpers import alert


def note(group: str, status: str = "firing", name: str = "ThroughputDrop") -> Notification:
    a = alert(name, status=status)
    return Notification("r", group, {}, status, [a], [a.fingerprint], 0.0)  # type: ignore[arg-type]


def test_dedup_order_and_survives_reopen(tmp_path: Path) -> None:
    ob = Outbox(open_db(tmp_path / "db"), OutboxConfig())
    assert ob.put(note("g1"), 0) and not ob.put(note("g1"), 1)  # same group+status+alerts still pending
    assert ob.put(note("g1", "resolved"), 2) and ob.put(note("g2"), 3)
    heads = ob.heads_due(10)
    assert [(h.group_key, h.status) for h in heads] == [("g1", "firing"), ("g2", "firing")]
    ob.delivered(heads[:1])
    ob2 = Outbox(open_db(tmp_path / "db"), OutboxConfig())
    assert [(h.group_key, h.status) for h in ob2.heads_due(10)] == [("g1", "resolved"), ("g2", "firing")]
    assert ob2.depth() == 2


def test_backoff_grows_with_seeded_jitter_and_blocks_the_group(tmp_path: Path) -> None:
    runs = iter(range(10))

    def delays(seed: int) -> list[float]:
        ob = Outbox(open_db(tmp_path / f"db{next(runs)}"), OutboxConfig(1.0, 8.0, 0.2, seed))
        ob.put(note("g"), 0)
        ob.put(note("g", "resolved"), 0)
        out, now = [], 0.0
        for _ in range(6):
            (head,) = ob.heads_due(float("inf"))
            assert head.status == "firing"  # the group's second row waits for its head
            ob.claim([head])  # each attempt is recorded before it is sent
            nxt = ob.retry([head], now, "HTTP 500")
            out.append(nxt - now)
            assert ob.heads_due(nxt - 0.001) == []
            now = nxt
        return out

    d = delays(1)
    assert d == delays(1) and d != delays(2)
    for base, got in zip([1, 2, 4, 8, 8, 8], d, strict=True):
        assert 0.8 * base <= got <= 1.2 * base


def test_limiter_sliding_window_and_throttle() -> None:
    lim = RobotLimiter([(20, 60.0)], throttle_s=600)
    for i in range(20):
        assert lim.available(i) > 0
        lim.spend(i)
    assert lim.available(19.5) == 0 and lim.next_free(19.5) == 60.0
    assert lim.available(60.0) == 1
    lim.overrun(61)
    assert lim.available(100) == 0 and lim.next_free(100) == 661
    lim2 = RobotLimiter([(20, 60.0)])
    lim2.load_state(lim.to_state())
    assert lim2.available(100) == 0


def test_limiter_with_two_windows_like_feishu() -> None:
    lim = RobotLimiter([(100, 60.0), (5, 1.0)])
    for _ in range(5):
        lim.spend(10.0)
    assert lim.available(10.5) == 0 and lim.next_free(10.5) == 11.0
    assert lim.available(11.0) == 5
