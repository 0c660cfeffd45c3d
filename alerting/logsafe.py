"""Logging set-up for the long-running commands: secrets never reach a log line.

httpx and httpcore log every request URL at INFO, and robot URLs carry their access token in the
query, so both are held at WARNING. Every record that does get through passes a filter that redacts
URLs the way notifier errors are redacted (``access_token``, ``key``, ``token``, ``sign``, ``secret``,
``timestamp`` query values and URL userinfo become ``***``), whichever logger wrote it."""

from __future__ import annotations

import logging

from alerting.notifiers.base import redact

NOISY_LOGGERS = ("httpx", "httpcore")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactingFilter(logging.Filter):
    """Formats the message once, redacted, so neither ``msg`` nor ``args`` can leak a secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a broken format string: keep the raw message, still redacted
            text = str(record.msg)
        record.msg, record.args = redact(text), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def setup_logging(level: int = logging.INFO, fmt: str = FORMAT) -> None:
    """Root handler with the redacting filter; httpx/httpcore at WARNING."""
    logging.basicConfig(level=level, format=fmt)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
