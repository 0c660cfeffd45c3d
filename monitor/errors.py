"""The monitor's one base for configuration errors: a bad key, rule, selector or duration.

Each message is one line naming the key (or file) and the fix; ``verl-monitor`` prints it and exits 2.
"""

from __future__ import annotations


class MonitorConfigError(ValueError):
    """One line naming the key and the fix."""
