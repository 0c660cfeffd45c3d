"""The robot stand-ins moved into the package (``harness/standin.py``) so the demo can use them; the
tests keep their historical names through this re-export."""

from harness.standin import DingTalkStandIn as FakeDingTalk
from harness.standin import FeishuStandIn as FakeFeishu
from harness.standin import Received
from harness.standin import RobotStandIn as FakeRobot
from harness.standin import WebhookStandIn as FakeWebhook
from harness.standin import WeComStandIn as FakeWeCom

__all__ = ["FakeDingTalk", "FakeFeishu", "FakeRobot", "FakeWeCom", "FakeWebhook", "Received"]
