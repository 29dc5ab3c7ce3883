"""What a backend says about a request: tiny frozen records, each stamped with ``t_ns``.

Backends only stamp events; the recorder does all the arithmetic (MLPerf LoadGen's rule: the
system under test only reports completions). A backend that produces several tokens at once (one
decode step of a batch, or an HTTP chunk carrying several tokens) sends one ``Tokens`` with one
stamp per token, so the event stream stays short at tens of thousands of tokens per second.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sent:
    """The request left the client: its bytes were handed to the socket (after any wait for a
    connection). Backends that can see this stamp it; the runner's hand-over stamp stands
    otherwise. Dispatch lag counts to here, so the client's own waits are never the server's.

    An HTTP client also says where its part of that time went (ns, from the request's start in
    the client): waiting for a pooled connection, opening a new one, and time this process
    was off the CPU while it had work to do (another process held the core); the rest was the
    client's own work on the event loop. ``retries``: sends onto a kept-alive connection the
    server had already closed, sent again on a new one (the send stamped is the last). As it
    comes once the answer's head is in, it also says when the answer's first byte came."""

    t_ns: int
    pool_ns: int = 0
    connect_ns: int = 0
    off_cpu_ns: int = 0
    retries: int = 0
    endpoint: str | None = None  # of several endpoints (a served model's), the one it went to
    tls_ns: int = 0  # of connect_ns, the TLS handshake
    connected_ns: int = 0  # when it had its connection (0: not seen)
    first_byte_ns: int = 0  # when the answer's first byte came (0: not seen)
    request_id: str | None = None  # the correlation id it carried (a header), where it did


@dataclass(frozen=True, slots=True)
class Admitted:
    """The engine put the request into a running batch."""

    t_ns: int


@dataclass(frozen=True, slots=True)
class Tokens:
    """Output tokens now on the host: one monotonic stamp per token, non-decreasing."""

    t_ns: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Finished:
    """The last token arrived (or, not streamed, the whole answer). ``output_tokens`` is what
    the engine says it generated."""

    t_ns: int
    output_tokens: int
    input_tokens: int | None = None
    response_id: str | None = None  # the server's id for the response, where it gives one
    reported_tokens: int | None = None  # what the server's usage claimed, where it streams one
    text: str | None = None  # the reply's text: asked for by a multi-turn session's turn only
    # output tokens that were a reasoning model's thinking, and when the first answer token
    # (not reasoning) arrived (None where none did, or the backend does not tell them apart)
    reasoning_tokens: int = 0
    first_answer_ns: int | None = None
    # False: an answer that was not streamed (``stream: false``): its output_tokens came all at
    # once with it, unstamped; no first token or gaps between tokens are claimed
    streamed: bool = True


@dataclass(frozen=True, slots=True)
class Failed:
    """The request failed; ``error_type`` is the counted category (an exception class name)."""

    t_ns: int
    error_type: str
    message: str = ""
    endpoint: str | None = None  # of several endpoints, the one it failed at (never sent there)
    request_id: str | None = None  # the correlation id it carried (or was to carry)


BackendEvent = Sent | Admitted | Tokens | Finished | Failed


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The client cancelled the request mid-stream, as the plan said (``load.cancel``): it
    closed the connection at ``t_ns``, after the ``Tokens`` it had read."""

    t_ns: int
