"""How every call to a server connects: TLS (verification, CA, client certificate) and the
proxy, one configuration for the requests and for every call beside them (discovery,
``/tokenize``, ``/metrics``, the DCGM exporter, the profiler's start and stop).

Proxies as Python users expect them: ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` under the
standard library's own rules (``urllib.request.getproxies_environment`` and
``proxy_bypass_environment``), unless a proxy is named (``proxy: URL``, which wins) or none is
wanted (``proxy: none``). An http URL goes to the proxy as an absolute-form request; an https
one through a ``CONNECT`` tunnel, TLS to the server inside it. A Unix socket never goes through
a proxy.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.transport.endpoint import Endpoint

FROM_ENVIRONMENT, NO_PROXY = "env", "none"


@dataclass(frozen=True)
class ClientSettings:
    """One client configuration. ``headers`` go with every call to ``origin`` (the server's:
    its API key among them), never to another origin (a DCGM exporter elsewhere)."""

    verify_tls: bool = True
    ca_bundle: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    client_key_password: str | None = field(default=None, repr=False)
    proxy: str = FROM_ENVIRONMENT
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    origin: str | None = None  # the server's, whose calls carry ``headers``
    connect_timeout_s: float = 10.0
    read_timeout_ns: int = 60_000_000_000

    def headers_for(self, endpoint: Endpoint) -> dict[str, str]:
        return dict(self.headers) if endpoint.origin == self.origin else {}

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of an https call: the system's CAs (``SSL_CERT_FILE`` and
        ``SSL_CERT_DIR`` are OpenSSL's own) or ``ca_bundle``'s; a client certificate where
        one is given. ValueError names a file that cannot be read, or a key that does not open."""
        try:
            ctx = ssl.create_default_context(
                cafile=str(self.ca_bundle) if self.ca_bundle is not None else None
            )
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"ca_bundle {self.ca_bundle}: not a CA file ({exc})") from None
        if not self.verify_tls:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert is not None:
            try:
                ctx.load_cert_chain(
                    str(self.client_cert),
                    str(self.client_key) if self.client_key is not None else None,
                    self.client_key_password,
                )
            except (OSError, ssl.SSLError) as exc:
                what = f"client_cert {self.client_cert}"
                if self.client_key is not None:
                    what += f" with client_key {self.client_key}"
                raise ValueError(f"{what}: {_why_no_cert(exc)}") from None
        return ctx

    def proxy_for(self, endpoint: Endpoint) -> Endpoint | None:
        """The proxy a call to ``endpoint`` goes through, or None (straight to it)."""
        if endpoint.scheme == "unix" or self.proxy == NO_PROXY:
            return None
        if self.proxy != FROM_ENVIRONMENT:
            return proxy_endpoint(self.proxy)
        import urllib.request

        found = urllib.request.getproxies_environment()
        url = found.get(endpoint.scheme)
        if not url:
            return None
        no = found.get("no")
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if no and bypass(endpoint.host, {"no": no}):
            return None
        return proxy_endpoint(url)


def proxy_endpoint(url: str) -> Endpoint:
    """A proxy's URL parsed (``http://[user:pw@]host:port``; a bare ``host:port`` as curl
    takes it); ValueError where it cannot be one."""
    if "://" not in url:
        url = f"http://{url}"
    endpoint = Endpoint.parse(url)
    if endpoint.scheme != "http":
        raise ValueError(
            f"proxy {endpoint.origin}: only an http:// proxy is spoken to (https URLs go "
            "through it in a CONNECT tunnel)"
        )
    return endpoint


def _why_no_cert(exc: Exception) -> str:
    text = str(exc)
    if "PEM lib" in text or "BAD_DECRYPT" in text.upper() or "bad decrypt" in text:
        return "the key does not open (its password, client_key_password_env?) or does not match"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if "KEY_VALUES_MISMATCH" in text.upper():
        return "the key is not the certificate's"
    return text


def key_password(env_name: str | None) -> str | None:
    """A client key's password, from the environment variable named (never from a file)."""
    return os.environ.get(env_name) if env_name else None
