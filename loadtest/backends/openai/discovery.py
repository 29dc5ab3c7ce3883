"""What a served endpoint offers, asked before a run: the models behind ``/v1/models``."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

from loadtest.core import secrets
from loadtest.core.errors import BackendError
from loadtest.core.text import visible


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


class _SameOriginAuth(urllib.request.HTTPRedirectHandler):
    """Follows a redirect, but never carries credentials to another origin."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _origin(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def list_models(base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> list[str]:
    """The model ids the server lists at ``{base_url}/models`` (OpenAI's format), in its order.

    A server that does not answer within ``timeout_s``, answers with an error, or answers
    something that is not a model list raises BackendError with the reason."""
    return [str(m["id"]) for m in _model_list(base_url, api_key, timeout_s)]


def model_root(
    base_url: str, model: str, api_key: str | None = None, timeout_s: float = 10.0
) -> str | None:
    """Where the server loaded ``model`` from, as its ``/v1/models`` entry says (vLLM and SGLang:
    ``root``, the folder or hub id behind a ``--served-model-name``), or None."""
    try:
        entries = _model_list(base_url, api_key, timeout_s)
    except BackendError:
        return None
    for entry in entries:
        root = entry.get("root")
        if str(entry["id"]) == model and isinstance(root, str) and 0 < len(root) <= 4096:
            return root if root != model else None
    return None


def _model_list(base_url: str, api_key: str | None, timeout_s: float) -> list[dict]:
    secrets.register(api_key)
    plain, auth = authorization(base_url, api_key)
    url = plain.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if auth:
        request.add_header("Authorization", auth)
    opener = urllib.request.build_opener(_SameOriginAuth)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        raise BackendError(f"{secrets.redact_url(url)}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BackendError(f"{secrets.redact_url(url)}: no answer ({reason})") from None
    except http.client.HTTPException as exc:  # an SSH or FTP banner, or no HTTP at all
        answer = visible(str(exc)[:80])
        raise BackendError(f"{secrets.redact_url(url)}: not an HTTP answer ({answer})") from None
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
