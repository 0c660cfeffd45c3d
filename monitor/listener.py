"""The daemon's one listener: the JSON API (``monitor.api``) and the console (``monitor.web``) on one
port, served by uvicorn with the guards of ``monitor.httpguard``."""

from __future__ import annotations

from typing import Any

from monitor.api import MonitorAPI
from monitor.web.app import build_app


def listen(daemon: Any, host: str, port: int, token: str | None) -> MonitorAPI:
    """Bound at once (OSError when the port is taken); serving after ``start()``."""
    return MonitorAPI(daemon, host, port, token, app=build_app)
