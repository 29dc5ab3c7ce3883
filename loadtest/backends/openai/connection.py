"""The HTTP side of the client: its pool of connections (``http1``: headers, TLS, the limit,
timeouts), the wire stamps of each request, and the small calls beside the requests (the
server's profiler, its ``/tokenize``, its ``/models``)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest.backends.openai.http1 import ConnectionPool, HttpFailure
from loadtest.core import outside
from loadtest.core.events import Sent

ERROR_TEXT_CHARS = 300  # of an error body or exception message kept for the result


def open_pool(
    spec: Any, url: str, headers: dict[str, str], base_dir: Path, now: Callable[[], int]
) -> ConnectionPool:
    """The client's connections to ``url``'s server: at most ``max_connections`` (0:
    unbounded), the spec's timeouts and TLS settings, its stamps on ``now``."""
    return ConnectionPool(
        url,
        headers,
        _ssl_context(spec, base_dir),
        spec.max_connections,
        spec.connect_timeout,
        spec.read_timeout,
        now,
    )


def _ssl_context(spec: Any, base_dir: Path) -> ssl.SSLContext | bool:
    if not spec.verify_tls:
        return False
    if spec.ca_bundle:
        path = Path(spec.ca_bundle).expanduser()
        return ssl.create_default_context(
            cafile=str(path if path.is_absolute() else base_dir / path)
        )
    return True


class Wire:
    """A request's stamps, as the pool takes them: when it started in the client and when its
    bytes left (with the thread's CPU time at both), and its waits on the way: for a pooled
    connection (``queued_ns``) and for a new one (``connect_ns``)."""

    __slots__ = ("connect_ns", "cpu_sent_ns", "cpu_start_ns", "queued_ns", "sent_ns", "start_ns")

    def __init__(self) -> None:
        self.sent_ns = self.start_ns = self.cpu_start_ns = self.cpu_sent_ns = 0
        self.queued_ns = self.connect_ns = 0

    def sent(self) -> Sent:
        """The send, and where the client's part of its lateness went: the thread was off the
        CPU for whatever of the elapsed time it neither ran nor waited on the network for."""
        elapsed = max(0, self.sent_ns - self.start_ns)
        waited = self.queued_ns + self.connect_ns
        off_cpu = elapsed - (self.cpu_sent_ns - self.cpu_start_ns) - waited
        return Sent(
            self.sent_ns,
            pool_ns=self.queued_ns,
            connect_ns=self.connect_ns,
            off_cpu_ns=max(0, off_cpu),
        )


async def error_text(resp: Any) -> str:
    """The start of an error body (never the whole of a hostile one), as text; for a redirect,
    where to (redirects are not followed: the base URL should say where the API is)."""
    if 300 <= resp.status < 400:
        where = resp.headers.get("location", "?")[:200]
        return f"redirected to {where!r}, not followed: point base_url there"
    return (await resp.text(4096))[:ERROR_TEXT_CHARS]


async def fetch(
    pool: ConnectionPool,
    method: str,
    url: str,
    body: bytes = b"",
    limit: int = 1 << 16,
    read_timeout_ns: int | None = None,
) -> tuple[int, bytes]:
    """One small call beside the requests: its status and its body's first ``limit`` bytes
    (bounded: a call's answer is a few bytes; a longer one is cut there)."""
    resp = await pool.request(method, url, body, read_timeout_ns=read_timeout_ns)
    try:
        return resp.status, await resp.read(limit)
    finally:
        resp.release()


async def profiler_call(pool: ConnectionPool, root: str, name: str) -> str | None:
    """POST ``/<name>`` at the server's root (vLLM's ``/start_profile``, ``/stop_profile``);
    None on success, else why not. No read timeout: a server writes its traces before it
    answers, and the caller bounds how long that may take."""
    try:
        status, _ = await fetch(pool, "POST", f"{root}/{name}", read_timeout_ns=0)
    except HttpFailure as exc:
        return f"POST /{name}: {exc.kind}"
    if status >= 400:
        hint = " (vLLM serves it when started with --profiler-config)"
        return f"POST /{name}: HTTP {status}" + (hint if status == 404 else "")
    return None


async def server_token_count(pool: ConnectionPool, root: str, model: str, text: str) -> int | None:
    """How many tokens the server's own ``/tokenize`` (vLLM, SGLang) makes of ``text``, or
    None where it has none."""
    try:
        body = json.dumps({"model": model, "prompt": text}).encode()
        status, raw = await fetch(pool, "POST", f"{root}/tokenize", body)
        if status >= 400:
            return None
        answer = outside.loads(raw.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON: the server has no /tokenize
        return None
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    return count


async def served_models(pool: ConnectionPool, base: str) -> list[str] | None:
    """The model names the server lists at ``GET /models`` (under the API's base URL), or
    None where it lists none (no such endpoint, or not the OpenAI shape)."""
    try:
        status, raw = await fetch(pool, "GET", f"{base.rstrip('/')}/models", limit=1 << 20)
        if status >= 400:
            return None
        answer = outside.loads(raw.decode("utf-8", "replace"))
    except Exception:  # no such endpoint, or not JSON
        return None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
