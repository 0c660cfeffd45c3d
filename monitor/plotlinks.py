"""Plot links people can open and plot bytes notifiers read without HTTP.

With ``bearer_token`` set, the monitor's API answers 401 to a phone opening a chat link, and the WeCom
notifier used to fetch its own plot over HTTP without the token (401, no image, nothing logged). So:

- ``url`` gives a signed, expiring link (``?exp=<unix s>&sig=<HMAC-SHA256(token, name|exp)>``): the API
  serves that one plot until ``exp`` without the bearer token, as S3's pre-signed URLs do;
- ``read`` hands the notifier the PNG straight from the plot directory (the engine passes it forward
  to notifiers that send images), waiting briefly for a plot still being rendered.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path

LINK_TTL_S = 7 * 86400.0
RENDER_WAIT_S = 2.0  # plots render in a worker thread, usually well within group_wait
_NAME = re.compile(r"/api/v1/plots/([A-Za-z0-9_.-]+\.png)(?:\?|$)")


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

    def read(self, ref: str) -> bytes | None:
        """The PNG a plot link of ours names (None: not ours, or not there)."""
        m = _NAME.search(ref)
        if m is None or not ref.startswith(self.prefix):
            return None
        path = self.dir / m.group(1)
        deadline = time.monotonic() + RENDER_WAIT_S
        while not path.is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            return path.read_bytes()
        except OSError:
            return None
