"""Answers read with a size limit: every HTTP answer the monitor and the alerting engine read comes from a
program they do not control (a Ray dashboard, a trainer, a chat robot's gateway), and httpx reads a whole
body into memory (a 500 MB Ray answer cost 5.1 GB). Streamed and cut at ``limit`` bytes, as Prometheus'
own ``body_size_limit`` does; a declared ``Content-Length`` over it is refused before reading.

httpx has no body limit of its own (its ``Limits`` are about connections), hence these few lines.
``tls_context`` is the one verifying TLS context of the process's clients."""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def tls_context() -> ssl.SSLContext:
    """httpx's own default context (``httpx.create_ssl_context``), made once: a client given none makes its
    own, loading and parsing the CA bundle again (~20 ms and a copy of the store for each notifier and
    source; an SSLContext serves any number of connections and threads)."""
    return httpx.create_ssl_context()


class BodyTooLarge(Exception):
    """The answer is larger than the reader allows; ``str`` names the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"answer over {limit >> 20 if limit >= 1 << 20 else limit} "
                         f"{'MiB' if limit >= 1 << 20 else 'bytes'}")
        self.limit = limit


def _declared_over(resp: httpx.Response, limit: int) -> bool:
    declared = resp.headers.get("content-length", "")
    return declared.isdigit() and int(declared) > limit


async def read_async(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed ``resp`` (``client.stream``), at most ``limit`` bytes (raises BodyTooLarge)."""
    if _declared_over(resp, limit):
        raise BodyTooLarge(limit)
    parts, size = [], 0
    async for part in resp.aiter_bytes():
        size += len(part)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(part)
    return b"".join(parts)


def read(resp: httpx.Response, limit: int) -> bytes:
    """``read_async`` for a synchronous client's streamed answer."""
    if _declared_over(resp, limit):
        raise BodyTooLarge(limit)
    parts, size = [], 0
    for part in resp.iter_bytes():
        size += len(part)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(part)
    return b"".join(parts)
