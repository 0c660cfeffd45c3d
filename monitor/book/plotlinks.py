"""Plot links people can open from chat.

With ``bearer_token`` set, the monitor's API answers 401 to a phone opening a chat link. So ``url``
gives a signed, expiring link (``?exp=<unix s>&sig=<HMAC-SHA256(token, name|exp)>``): the API serves
that one plot until ``exp`` without the bearer token, as S3's pre-signed URLs do. Notifiers that send
images never come here: the PNG's path travels on the alert (``Alert.plot_file``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

LINK_TTL_S = 7 * 86400.0


class PlotLinks:
    def __init__(self, plots_dir: str | Path, prefix: str, token: str | None, ttl_s: float = LINK_TTL_S) -> None:
        self.dir = Path(plots_dir)
        self.prefix = prefix.rstrip("/")
        self.token = token
        self.ttl_s = ttl_s  # links expire by wall time, whatever clock the pipeline runs on

    def _sig(self, name: str, exp: int) -> str:
        assert self.token
        return hmac.new(self.token.encode(), f"{name}|{exp}".encode(), hashlib.sha256).hexdigest()

    def url(self, name: str) -> str:
        if not self.token:
            return f"{self.prefix}/{name}"
        exp = int(time.time() + self.ttl_s)
        return f"{self.prefix}/{name}?exp={exp}&sig={self._sig(name, exp)}"

    def valid(self, name: str, exp: str, sig: str) -> bool:
        """A signed link for ``name`` that has not expired (by wall time: people open it later)."""
        if not self.token or not exp.isdigit():
            return False
        return int(exp) > time.time() and hmac.compare_digest(sig, self._sig(name, int(exp)))
