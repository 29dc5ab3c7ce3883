"""Secrets stay secret: values registered here are replaced by ``***`` in every text loadtest
stores or shows.

Outside text (a server's error body, an exception message) can carry a secret back to us: a server
that echoes request headers puts the API key into its error. Scrubbing at the two places text
leaves the process (the atomic file writer and the terminal) covers every path at once, whatever
produced the text. Scenario fields that hold secrets (URL credentials, sensitive headers) are also
redacted by name when the scenario is saved into a result.
"""

from __future__ import annotations

import re
import threading
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_MIN_LEN = 4  # shorter values would mask ordinary text; no real credential is that short

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None

# Header and field names whose values are secret: compared lower-case, without spaces, - or _.
_SENSITIVE_EXACT = {"authorization", "proxyauthorization", "cookie", "setcookie"}
_SENSITIVE_PARTS = (
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "auth",
    "session",
    "signature",
)


def register(*values: str | None) -> None:
    """Treat each value as a secret from now on, in this process."""
    global _pattern
    with _lock:
        added = {v for v in values if isinstance(v, str) and len(v.strip()) >= _MIN_LEN}
        if added - _values:
            _values.update(added)
            ordered = sorted(
                _values, key=len, reverse=True
            )  # a key that contains another masks whole
            _pattern = re.compile("|".join(re.escape(v) for v in ordered))


def forget_all() -> None:
    """Tests only: start from no registered secrets."""
    global _pattern
    with _lock:
        _values.clear()
        _pattern = None


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    pattern = _pattern
    return text if pattern is None or not text else pattern.sub(MASK, text)


def scrub_tree(node: Any) -> Any:
    """A copy of a JSON-like tree (dicts, lists, strings) with every string scrubbed."""
    if _pattern is None:
        return node
    if isinstance(node, str):
        return scrub(node)
    if isinstance(node, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_tree(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [scrub_tree(v) for v in node]
    return node


def is_sensitive_name(name: str) -> bool:
    """``Authorization``, ``X-Api-Key``, ``session_token``, `` Cookie `` ...: its value is secret."""
    norm = re.sub(r"[\s_\-]", "", str(name)).lower()
    return norm in _SENSITIVE_EXACT or any(part in norm for part in _SENSITIVE_PARTS)


def url_credentials(url: str) -> list[str]:
    """The secrets written into a URL: its password and its whole ``user:password`` part (or
    a user name alone, which is then the credential). A user name beside a password is not
    masked alone: a short one ("user", "admin") would mask ordinary words everywhere."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    if "@" not in parts.netloc:
        return []
    userinfo = parts.netloc.rsplit("@", 1)[0]
    return [v for v in (parts.password, userinfo) if v]


def redact_url(url: str) -> str:
    """``https://user:pw@host/v1`` -> ``https://***@host/v1``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


def redact_mapping(mapping: dict) -> dict:
    """A copy with the values of sensitive names masked, recursively (headers, extra_body)."""
    out: dict = {}
    for key, value in mapping.items():
        if is_sensitive_name(key) and value not in (None, ""):
            out[key] = MASK
        elif isinstance(value, dict):
            out[key] = redact_mapping(value)
        else:
            out[key] = value
    return out


def masked_names(mapping: dict, prefix: str = "") -> list[str]:
    """The dotted names in a mapping whose value is the mask itself: a secret a saved scenario
    held back, which must be given again rather than sent as ``***``."""
    found = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            found += masked_names(value, f"{prefix}{key}.")
        elif value == MASK and is_sensitive_name(key):
            found.append(f"{prefix}{key}")
    return found


def sensitive_values(mapping: dict) -> list[str]:
    """The string values of sensitive names in a mapping, recursively: to register them."""
    found = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            found += sensitive_values(value)
        elif is_sensitive_name(key) and isinstance(value, str):
            found.append(value)
            if " " in value.strip():  # "Bearer sk-...": the token alone too
                found.append(value.strip().split()[-1])
    return found


class ScrubbedStream:
    """A text stream that masks registered secrets in everything written to it: the CLI puts
    its stdout and stderr behind one each, so every channel (echo, rich, JSON, tracebacks)
    passes through this one scrubber."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(scrub(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def scrubbed(stream: IO[str]) -> IO[str]:
    """``stream`` behind the scrubber (once: a stream already behind it is returned as it is)."""
    return stream if isinstance(stream, ScrubbedStream) else ScrubbedStream(stream)  # type: ignore[return-value]
