"""The one error base of ``alerting``: every bad config file, key, duration or command line raises a
``AlertingConfigError`` (or a subclass) whose message is one line naming the file/key and the fix; callers catch
this one class and exit 2."""

from __future__ import annotations


class AlertingConfigError(ValueError):
    """One line: which file/key is wrong and how to fix it."""
