"""The client's calls to its server, on loadtest's transport (``loadtest.transport``): the pool
the requests go over, under the spec's one client configuration, and the small calls beside the
requests (the server's profiler, its ``/tokenize``, its ``/models``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest.backends.openai.discovery import authorization
from loadtest.core import outside
from loadtest.transport.calls import fetch
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings, key_password


def client_settings(spec: Any, base_dir: Path, base_url: str | None = None) -> ClientSettings:
    """The one client configuration of a served model's spec: its TLS, proxy and timeouts, and
    its headers (its own, the API key's or the URL's credentials) for the calls to its server's
    origin (``base_url``'s, of several endpoints: default the spec's), never to another."""

    def path(value: str | None) -> Path | None:
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else base_dir / p

    headers = dict(spec.headers)
    url = base_url or spec.base_url
    plain, auth = authorization(url, os.environ.get(spec.api_key_env) or None)
    if auth:
        headers["Authorization"] = auth
    return ClientSettings(
        verify_tls=spec.verify_tls,
        ca_bundle=path(spec.ca_bundle),
        client_cert=path(spec.client_cert),
        client_key=path(spec.client_key),
        client_key_password=key_password(spec.client_key_password_env),
        proxy=spec.proxy,
        headers=headers,
        origin=Endpoint.parse(plain).origin,
        connect_timeout_s=spec.connect_timeout / 1e9,
        read_timeout_ns=spec.read_timeout,
    )


def open_pool(
    spec: Any, url: str, settings: ClientSettings, now: Callable[[], int]
) -> ConnectionPool:
    """The client's connections to ``url``'s server: at most ``max_connections`` (0:
    unbounded), under ``settings``, its stamps on ``now``."""
    return ConnectionPool(url, settings, spec.max_connections, now)


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
