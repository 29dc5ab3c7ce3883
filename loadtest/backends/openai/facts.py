"""What the HTTP client saw over a point, for the result: its counters (statuses, pool waits,
bad responses, usage checks) and a warning for each problem they show."""

from __future__ import annotations

import os
from collections import Counter

from loadtest.backends.base import Facts
from loadtest.backends.openai.outputs import summary
from loadtest.backends.openai.stream import MAX_REPLY_CHARS
from loadtest.config.backend_specs import OpenAISpec

# Each counter that is a problem when not zero, and what it says: a template filled from the
# counters (0 where one was never counted) and the client's settings.
WARNINGS = {
    "usage_implausible": "{usage_implausible} requests: the server's usage claimed "
    "{usage_implausible_reported} output tokens where {usage_implausible_streamed} were "
    "streamed; not plausible, so the streamed count was used",
    "replies_cut": "{replies_cut} session replies were longer than {reply_mib} MiB: the history "
    "of their next turns holds the start of each only",
    "bad_response": "{bad_response} responses were not OpenAI-shaped streams (bad_response)",
    "connection_waits": "{connection_waits} requests waited for a free connection in the "
    "client's pool (max_connections: {max_connections}), {connection_wait_ms:.1f} ms in all: "
    "client lag, counted in dispatch lag, not in the server's latency",
    "short_outputs": "{short_outputs} requests returned fewer tokens than the fixed output "
    "length (fixed output via {fixed_via}): the server stopped early",
    "fixed_unsupported": "no fixed-length option (fixed_output: {fixed_via}): "
    "{fixed_unsupported} requests asked for a fixed length and could stop at EOS",
    "tool_calls_bad_json": "{tool_calls_bad_json} of {tool_calls} tool calls had arguments "
    "that are not JSON",
    "tool_calls_schema_mismatch": "{tool_calls_schema_mismatch} of {tool_calls} tool calls had "
    "arguments that break the tool's schema",
    "tool_calls_unknown_tool": "{tool_calls_unknown_tool} tool calls named a tool not offered",
    "tool_calls_missing": "{tool_calls_missing} requests had to call a tool and did not",
    "structured_bad_json": "{structured_bad_json} of {structured_checked} answers asked for as "
    "JSON were not JSON",
    "structured_schema_mismatch": "{structured_schema_mismatch} of {structured_checked} answers "
    "broke the schema they were asked to follow",
    "reasoning_usage_mismatch": "{reasoning_usage_mismatch} requests: the server's usage "
    "counted a different number of reasoning tokens than it streamed as reasoning (the "
    "streamed split is reported)",
    "prompt_token_mismatch": "{prompt_token_mismatch} requests: the server counted a different "
    "prompt length than planned, {prompt_tokens_off} tokens off in all (its tokenizer or chat "
    "template differs from the client's; requests.jsonl has each request's input_tokens beside "
    "planned_input_tokens)",
}


def described(
    spec: OpenAISpec,
    *,
    server_model: str | None,
    fixed_via: str | None,
    tokenizer: str,
    counts_tokens: bool,
    proxy: str,
    sizing: str,
    streamed: bool,
) -> Facts:
    """The client as the result describes it: where it sends, how it counts tokens and sizes
    prompts, its TLS, proxy and connection settings (the API key's source, never its value)."""
    return {
        "base_url": spec.base_url,
        "model": spec.model,
        "api": spec.api,
        "server_model": server_model,
        "fixed_output_via": fixed_via,
        "tokenizer": tokenizer,
        "token_counting": "tokenizer (per chunk), reconciled to the server's usage"
        if counts_tokens
        else "one token per chunk, reconciled to the server's usage",
        "api_key": f"from ${spec.api_key_env}" if os.environ.get(spec.api_key_env) else "none",
        "tls_verify": spec.verify_tls,
        "client_certificate": spec.client_cert is not None,
        # its buffering is inside every stamp: a proxy between the client and the server
        "proxy": proxy,
        "max_connections": spec.max_connections or "unbounded",
        "prompt_sizing": sizing,
        "streamed": streamed,
    }


def report(
    facts: Counter, max_connections: int, fixed_via: str | None, described: dict | None = None
) -> dict:
    """The counters as the result's ``backend.http``, with the warnings they call for; and,
    where outputs were checked or media sent (``described``), ``backend.checks``."""
    out: dict = {"http": dict(facts)}
    checks = summary(facts, described or {})
    if checks:
        out["checks"] = checks
    values = _Filled(
        facts,
        max_connections=max_connections,
        fixed_via=fixed_via,
        reply_mib=MAX_REPLY_CHARS >> 20,
        connection_wait_ms=facts["connection_wait_ns"] / 1e6,
    )
    warnings = [text.format_map(values) for key, text in WARNINGS.items() if facts[key]]
    if facts["other_model"]:
        where = ", ".join(
            f"{key.partition('@')[2]}: {n}"
            for key, n in facts.items()
            if key.startswith("other_model@")
        )
        warnings.append(
            f"{facts['other_model']} answers named another model than the one the server "
            f"answered as at start ({where}): their figures are another model's, pooled "
            "with this one's"
        )
    if warnings:
        out["warnings"] = warnings
    return out


class _Filled(dict):
    """A template's values: the client's settings, then its counters (0 when never counted)."""

    def __init__(self, counters: Counter, **settings: object) -> None:
        super().__init__(settings)
        self.counters = counters

    def __missing__(self, key: str) -> object:
        return self.counters[key]
