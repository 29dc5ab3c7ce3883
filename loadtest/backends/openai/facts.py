"""What the HTTP client saw over a point, for the result: its counters (statuses, pool waits,
bad responses, usage checks) and a warning for each problem they show."""

from __future__ import annotations

from collections import Counter

from loadtest.backends.openai.stream import MAX_REPLY_CHARS


def report(facts: Counter, max_connections: int, fixed_via: str | None) -> dict:
    """The counters as the result's ``backend.http``, with the warnings they call for."""
    out: dict = {"http": dict(facts)}
    warnings = [
        describe(facts, max_connections, fixed_via) for key, describe in _WARNINGS if facts[key]
    ]
    if warnings:
        out["warnings"] = warnings
    return out


def _implausible(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"{facts['usage_implausible']} requests: the server's usage claimed "
        f"{facts['usage_implausible_reported']} output tokens where "
        f"{facts['usage_implausible_streamed']} were streamed; not plausible, so the "
        "streamed count was used"
    )


def _replies_cut(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"{facts['replies_cut']} session replies were longer than {MAX_REPLY_CHARS >> 20} MiB: "
        "the history of their next turns holds the start of each only"
    )


def _bad_response(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return f"{facts['bad_response']} responses were not OpenAI-shaped streams (bad_response)"


def _connection_waits(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"{facts['connection_waits']} requests waited for a free connection in the "
        f"client's pool (max_connections: {max_connections}), "
        f"{facts['connection_wait_ns'] / 1e6:.1f} ms in all: client lag, counted in "
        "dispatch lag, not in the server's latency"
    )


def _short_outputs(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"{facts['short_outputs']} requests returned fewer tokens than the fixed output length "
        f"(fixed output via {fixed_via}): the server stopped early"
    )


def _fixed_unsupported(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"no fixed-length option (fixed_output: {fixed_via}): {facts['fixed_unsupported']} "
        "requests asked for a fixed length and could stop at EOS"
    )


def _prompt_mismatch(facts: Counter, max_connections: int, fixed_via: str | None) -> str:
    return (
        f"{facts['prompt_token_mismatch']} requests: the server counted a different prompt "
        f"length than planned, {facts['prompt_tokens_off']} tokens off in all (its tokenizer "
        "or chat template differs from the client's; requests.jsonl has each request's "
        "input_tokens beside planned_input_tokens)"
    )


# each counter that is a problem when not zero, and what it says
_WARNINGS = (
    ("usage_implausible", _implausible),
    ("replies_cut", _replies_cut),
    ("bad_response", _bad_response),
    ("connection_waits", _connection_waits),
    ("short_outputs", _short_outputs),
    ("fixed_unsupported", _fixed_unsupported),
    ("prompt_token_mismatch", _prompt_mismatch),
)
