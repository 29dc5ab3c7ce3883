"""What a served endpoint offers, asked before a run: the models behind ``/v1/models``."""

from __future__ import annotations

import dataclasses
import json
from urllib.parse import urlsplit, urlunsplit

from loadtest.core import secrets
from loadtest.core.errors import BackendError
from loadtest.transport.calls import call
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.settings import ClientSettings


def server_root(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000``: where servers put their non-OpenAI
    endpoints (``/metrics``, vLLM's ``/tokenize`` and ``/start_profile``)."""
    return base_url.rstrip("/").removesuffix("/v1")


def authorization(base_url: str, api_key: str | None) -> tuple[str, str | None]:
    """The URL to send to (without credentials) and the Authorization header to send with it:
    the URL's own credentials (``http://user:pw@host/v1``) as Basic auth, else the API key as
    a Bearer token. Credentials in the URL are the explicit choice for that server, so an API
    key from the environment is not sent beside them (one header can hold one)."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(base_url)
    if parts.username is None and parts.password is None:
        return base_url, (f"Bearer {api_key}" if api_key else None)
    host = parts.netloc.rsplit("@", 1)[1]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    secrets.register(pair, base64.b64encode(pair.encode()).decode())
    token = base64.b64encode(pair.encode()).decode()
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` taken out."""
    return authorization(url, None)[0]


def list_models(
    base_url: str,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    settings: ClientSettings | None = None,
) -> list[str]:
    """The model ids the server lists at ``{base_url}/models`` (OpenAI's format), in its order,
    asked under ``settings`` (TLS, proxy, headers: the run's own; default: the environment's
    proxy, the system's CAs).

    A server that does not answer within ``timeout_s``, answers with an error, or answers
    something that is not a model list raises BackendError with the reason."""
    return [str(m["id"]) for m in _model_list(base_url, api_key, timeout_s, settings)]


# endpoint paths a user may paste whole: the API's base URL is what comes before them, and
# the path names the API (None: the model list, no API of its own)
ENDPOINT_PATHS = {
    "/chat/completions": "chat",
    "/completions": "completions",
    "/embeddings": "embeddings",
    "/responses": "responses",
    "/rerank": "rerank",
    "/models": None,
}


def api_base(
    url: str, api_key: str | None = None, settings: ClientSettings | None = None
) -> tuple[str, str | None]:
    """The API's base URL from a URL a user typed, and the API its path named (or None): a
    full endpoint's path is cut to its base (``.../v1/chat/completions`` -> ``.../v1``, chat);
    a server's root (``http://host:8000``) is asked for its models there, then under ``/v1``,
    the form vLLM, SGLang and TGI serve. BackendError saying what to give where neither
    answers; any other URL is taken as the base it names."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url, None
    path = parts.path.rstrip("/")
    for suffix, api in ENDPOINT_PATHS.items():
        if path.endswith(suffix):
            return urlunsplit(parts._replace(path=path[: -len(suffix)])), api
    if path:
        return url, None
    root = urlunsplit(parts._replace(path=""))
    tried = []
    for base in (root, root + "/v1"):
        try:
            _model_list(base, api_key, 10.0, settings)
            return base, None
        except BackendError as exc:
            tried.append(str(exc))
    raise BackendError(
        f"no OpenAI-compatible API at the server's root nor under /v1 ({'; '.join(tried)}): "
        f"give the API's base URL, as {secrets.redact_url(root)}/v1 for vLLM, SGLang and TGI"
    )


def model_root(
    base_url: str,
    model: str,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    settings: ClientSettings | None = None,
) -> str | None:
    """Where the server loaded ``model`` from, as its ``/v1/models`` entry says (vLLM and SGLang:
    ``root``, the folder or hub id behind a ``--served-model-name``), or None."""
    try:
        entries = _model_list(base_url, api_key, timeout_s, settings)
    except BackendError:
        return None
    for entry in entries:
        root = entry.get("root")
        if str(entry["id"]) == model and isinstance(root, str) and 0 < len(root) <= 4096:
            return root if root != model else None
    return None


def _model_list(
    base_url: str, api_key: str | None, timeout_s: float, settings: ClientSettings | None
) -> list[dict]:
    secrets.register(api_key)
    plain, auth = authorization(base_url, api_key)
    url = plain.rstrip("/") + "/models"
    shown = secrets.redact_url(url)
    try:
        endpoint = Endpoint.parse(url)
    except ValueError as exc:
        raise BackendError(f"{shown}: {exc}") from None
    settings = settings or ClientSettings()
    headers = {**settings.headers, "Accept": "application/json"}
    if auth:
        headers["Authorization"] = auth
    try:
        status, body = call(
            dataclasses.replace(settings, headers=headers, origin=endpoint.origin),
            "GET",
            url,
            timeout_s=timeout_s,
        )
    except HttpFailure as exc:
        if exc.kind == "bad_http":  # an SSH or FTP banner, or no HTTP at all
            raise BackendError(f"{shown}: not an HTTP answer ({exc})") from None
        raise BackendError(f"{shown}: no answer ({exc})") from None
    except ValueError as exc:  # a setting that cannot be used (a CA file that is none)
        raise BackendError(f"{shown}: {exc}") from None
    if 300 <= status < 400:
        raise BackendError(f"{shown}: HTTP {status}, a redirect, not followed: point the URL there")
    if status >= 400:
        raise BackendError(f"{shown}: HTTP {status}") from None
    try:
        entries = json.loads(body)["data"]
        if not all(isinstance(m, dict) and "id" in m for m in entries):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise BackendError(
            f"{secrets.redact_url(url)}: not an OpenAI model list; give --model"
        ) from None
    if not entries:
        raise BackendError(f"{secrets.redact_url(url)}: the server lists no model; give --model")
    return entries
