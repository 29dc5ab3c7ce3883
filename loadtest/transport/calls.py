"""One small call beside the requests, its answer read whole (bounded): on a pool the run holds
(``fetch``), or on its own from a thread or before the run (``call``: a connection of its own
under the same settings, closed after)."""

from __future__ import annotations

import asyncio
import time

from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings

ERROR_TEXT_CHARS = 300  # of an error body or exception message kept for the result


async def fetch(
    pool: ConnectionPool,
    method: str,
    url: str,
    body: bytes = b"",
    limit: int = 1 << 16,
    read_timeout_ns: int | None = None,
) -> tuple[int, bytes]:
    """One call on ``pool``: its status and its body's first ``limit`` bytes (bounded: a
    call's answer is a few bytes; a longer one is cut there)."""
    resp = await pool.request(method, url, body, read_timeout_ns=read_timeout_ns)
    try:
        return resp.status, await resp.read(limit)
    finally:
        resp.release()


def call(
    settings: ClientSettings,
    method: str,
    url: str,
    body: bytes = b"",
    limit: int = 1 << 20,
    timeout_s: float = 10.0,
) -> tuple[int, bytes]:
    """One call from synchronous code (a sampler's thread, discovery before a run): its status
    and body, within ``timeout_s`` all told. HttpFailure says why there is none; ValueError, a
    URL or setting that cannot be used."""
    return asyncio.run(_call(settings, method, url, body, limit, timeout_s))


async def _call(
    settings: ClientSettings, method: str, url: str, body: bytes, limit: int, timeout_s: float
) -> tuple[int, bytes]:
    pool = ConnectionPool(url, settings, 1, time.monotonic_ns)
    try:
        return await asyncio.wait_for(fetch(pool, method, url, body, limit), timeout_s)
    except asyncio.TimeoutError:
        raise HttpFailure("read_timeout", f"no answer within {timeout_s:g} s") from None
    finally:
        await pool.close()


def scrape(
    settings: ClientSettings, url: str, limit: int, timeout_s: float
) -> tuple[bytes | None, str | None]:
    """A page a sampler reads (``/metrics``, a DCGM exporter's): its body, or None and why
    not (a failed call, a status other than 200), short."""
    try:
        status, page = call(settings, "GET", url, b"", limit, timeout_s)
    except (HttpFailure, OSError, ValueError) as exc:
        return None, failure_text(exc)
    return (page, None) if status == 200 else (None, f"HTTP {status}")


def failure_text(exc: BaseException) -> str:
    """Why a call failed, short (a sampler's last error): its kind and its words."""
    kind = exc.kind if isinstance(exc, HttpFailure) else type(exc).__name__
    return f"{kind}: {exc}"[:200]


async def error_text(resp) -> str:
    """The start of an error body (never the whole of a hostile one), as text; for a redirect,
    where to (redirects are not followed: the base URL should say where the API is)."""
    if 300 <= resp.status < 400:
        where = resp.headers.get("location", "?")[:200]
        return f"redirected to {where!r}, not followed: point base_url there"
    return (await resp.text(4096))[:ERROR_TEXT_CHARS]
