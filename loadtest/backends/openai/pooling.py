"""Embeddings and rerank answers: one JSON document a request, no token stream. The request's
latency is the whole answer's (read to its last byte); its input tokens are the server's
``usage``; the answer is checked to hold one result per text sent."""

from __future__ import annotations

import json
from typing import Any

from loadtest.backends.openai.events import BadResponse
from loadtest.backends.openai.tokens import usage_count

# an answer's bytes a text sent, at most: a 8192-dimension float embedding as JSON is ~180 kB
MAX_ANSWER_BYTES_PER_INPUT = 1 << 20
MAX_ANSWER_SLACK = 1 << 16


async def read_answer(resp: Any, api: str, inputs: int) -> tuple[int | None, str | None]:
    """Read a pooled answer whole: its prompt tokens (None where it gives no usage) and the
    server's id for it. ``BadResponse`` for an answer that is not JSON, is too large, or does
    not hold one result per text sent (documents, for rerank)."""
    limit = MAX_ANSWER_BYTES_PER_INPUT * inputs + MAX_ANSWER_SLACK
    raw = await resp.read(limit + 1)  # to its end (or past the limit)
    if len(raw) > limit:
        raise BadResponse(f"the answer is over {limit} bytes for {inputs} texts")
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadResponse(f"not JSON: {exc}") from None
    except RecursionError:  # no answer of the API nests this deep
        raise BadResponse("JSON nested too deeply to read") from None
    if not isinstance(answer, dict):
        raise BadResponse(f"expected a JSON object, got {raw[:80]!r}")
    expected = inputs if api == "embeddings" else inputs - 1
    key = "data" if api == "embeddings" else "results"
    results = answer.get(key)
    if not isinstance(results, list) or len(results) != expected:
        got = len(results) if isinstance(results, list) else type(results).__name__
        raise BadResponse(f"{key}: expected {expected} results, got {got}")
    field = "embedding" if api == "embeddings" else "relevance_score"
    if not all(isinstance(r, dict) and field in r for r in results):
        raise BadResponse(f"{key}: a result without {field}")
    usage = answer.get("usage")
    tokens = usage_count(usage, "prompt_tokens")
    if tokens is None:
        tokens = usage_count(usage, "total_tokens")  # rerank's usage: total_tokens only
    rid = answer.get("id")
    return tokens, rid if isinstance(rid, str) and 0 < len(
        rid
    ) <= 128 and rid.isprintable() else None
