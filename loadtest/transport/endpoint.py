"""Where a call goes: a URL parsed once into its origin (how to connect), its path (what the
request line asks for) and its credentials (kept apart, never in a URL that is logged).

Three schemes: ``http://host:port/path``, ``https://...`` and ``unix:///run/vllm.sock:/v1``, a
Unix socket (``vllm serve --uds``) and, after the colon, the path the API lives under. The
socket's own path may hold no colon: the first one ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

SCHEMES = ("http", "https", "unix")
EXAMPLES = "http://127.0.0.1:8000/v1, https://host/v1 or unix:///run/vllm.sock:/v1"


@dataclass(frozen=True)
class Endpoint:
    """One parsed URL. ``host`` and ``port`` are empty and 0 for a Unix socket;
    ``username`` and ``password`` are the URL's own (``http://user:pw@host``), None where it
    has none."""

    scheme: str
    host: str
    port: int
    socket_path: str
    path: str  # with its query, as the request line carries it: "/v1/models?x=1"
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """``url`` parsed; ValueError says what is wrong with it (never with its credentials)."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc})") from None
        query = f"?{parts.query}" if parts.query else ""
        if parts.scheme == "unix":
            sock, colon, path = parts.path.partition(":")
            if parts.netloc or not sock.startswith("/"):
                raise ValueError("a Unix socket's URL names its file: unix:///run/vllm.sock:/v1")
            if not colon:
                raise ValueError(
                    "give the path the API is under after the socket's file and a colon, "
                    f"such as unix://{sock}:/v1"
                )
            return cls("unix", "", 0, sock, (path or "/") + query)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"give an http://, https:// or unix:// URL, such as {EXAMPLES}")
        if not parts.hostname:
            raise ValueError("no host in the URL")
        return cls(
            parts.scheme,
            parts.hostname,
            port or (443 if parts.scheme == "https" else 80),
            "",
            (parts.path or "/") + query,
            None if parts.username is None else unquote(parts.username),
            None if parts.password is None else unquote(parts.password),
        )

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def origin(self) -> str:
        """What a connection is to: ``https://host:443``, ``unix:///run/vllm.sock``."""
        if self.scheme == "unix":
            return f"unix://{self.socket_path}"
        return f"{self.scheme}://{self.authority}"

    @property
    def authority(self) -> str:
        """``host:port`` (an IPv6 host in brackets): a CONNECT's target, a Host header's."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def host_header(self) -> str:
        """The Host header: the port left out where it is the scheme's own; a Unix socket's
        is ``localhost``, as curl and httpx send."""
        if self.scheme == "unix":
            return "localhost"
        default = 443 if self.tls else 80
        return self.authority if self.port != default else self.authority.rsplit(":", 1)[0]

    @property
    def url(self) -> str:
        """The URL again, without credentials."""
        if self.scheme == "unix":
            return f"{self.origin}:{self.path}"
        return f"{self.origin}{self.path}"
