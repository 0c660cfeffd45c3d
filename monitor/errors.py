"""The monitor's one base for configuration errors: a bad key, rule, selector or duration.

Each message is one line naming the key (or file) and the fix; ``verl-monitor`` prints it and exits 2.
"""

from __future__ import annotations


class MonitorConfigError(ValueError):
    """One line naming the key and the fix."""


# The old name, kept only for the two modules another branch is rewriting (rules, signals); new code names
# MonitorConfigError, and the alias goes once those branches have merged.
ConfigError = MonitorConfigError
