"""The client's calls to its server, on loadtest's transport (``loadtest.transport``): the pool
the requests go over, under the spec's one client configuration, and the small calls beside the
requests (the server's profiler, its ``/tokenize``, its ``/models``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from loadtest.backends.openai.bodies import PATHS
from loadtest.backends.openai.discovery import authorization, server_root, without_credentials
from loadtest.backends.openai.routes import Route
from loadtest.config.backend_specs import OpenAISpec
from loadtest.core import outside
from loadtest.core.errors import BackendError
from loadtest.transport.calls import fetch
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.settings import ClientSettings, key_password


def client_settings(
    spec: OpenAISpec, base_dir: Path, base_url: str | None = None
) -> ClientSettings:
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
    spec: OpenAISpec, url: str, settings: ClientSettings, now: Callable[[], int]
) -> ConnectionPool:
    """The client's connections to ``url``'s server: at most ``max_connections`` (0:
    unbounded), under ``settings``, its stamps on ``now``."""
    return ConnectionPool(url, settings, spec.max_connections, now)


def open_routes(spec: OpenAISpec, base_dir: Path, now: Callable[[], int]) -> list[Route]:
    """A route to each of the spec's endpoints, each with its pool under its own settings (its
    URL's credentials); ValueError for settings that cannot be used."""
    routes: list[Route] = []
    for given in spec.base_urls():
        base = without_credentials(given)
        url = base.rstrip("/") + PATHS[spec.api]
        pool = open_pool(spec, url, client_settings(spec, base_dir, given), now)
        # one URL twice (its logins differ, say): each its own row, by its place
        label = base
        if any(r.base == base for r in routes):
            label = f"{base} (endpoint {len(routes) + 1})"
        routes.append(Route(base, url, pool, label))
    return routes


async def profilers_call(routes: list[Route], name: str) -> str | None:
    """``profiler_call`` to each endpoint's server: None when all answered, else why the first
    that did not (named by its API root where there are several). A start goes no further
    than a failure (nothing left profiling unasked); a stop goes to every server."""
    first = None
    for route in routes:
        failed = await profiler_call(route.pool, server_root(route.base), name)
        if failed is not None and first is None:
            first = failed if len(routes) == 1 else f"{route.base}: {failed}"
            if name == "start_profile":
                break
    return first


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


async def check_serves(pool: ConnectionPool, base: str, url: str, models: set[str]) -> None:
    """A model mix's names are each served (where the server lists its models): a name it
    does not serve would fail every one of its requests, so the run does not start."""
    if not models:
        return
    listed = await served_models(pool, base)
    missing = sorted(models - set(listed or models))
    if missing:
        raise BackendError(
            f"{url}: workload.models names {', '.join(map(repr, missing))}, which the "
            f"server does not serve (it lists {', '.join(map(repr, listed or []))[:300]})"
        )


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
