"""The robot stand-ins moved into the package (``harness/standin.py``) so the demo can use them; the
tests keep their historical names through this re-export."""

from harness.standin import DingTalkStandIn as FakeDingTalk
from harness.standin import FeishuStandIn as FakeFeishu
from harness.standin import Received
from harness.standin import RobotStandIn as FakeRobot
from harness.standin import WebhookStandIn as FakeWebhook
from harness.standin import WeComStandIn as FakeWeCom

__all__ = ["FakeDingTalk", "FakeFeishu", "FakeRobot", "FakeWeCom", "FakeWebhook", "Received", "max_in_window"]


def max_in_window(robot: FakeRobot) -> int:
    """Most messages ``robot`` accepted inside any half-open window of its ``window_s`` (rate assertions)."""
    times = sorted(r.at for r in robot.received)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - robot.window_s:
            j += 1
        best = max(best, i - j + 1)
    return best
