"""A read answer's ending events: a complete stream's tokens (one stamp each, counted with the
tokenizer or a chunk a token, reconciled to the server's usage) and its ``Finished``; an
unstreamed answer's ``Finished``, its tokens unstamped; a pooling API's ``Finished``. Each counts what it shows in ``facts``:
short outputs, prompt-token mismatches, replies cut, answers without usage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from loadtest.backends.openai.stream import Stream
from loadtest.backends.openai.tokens import TokenCounter, usage_count
from loadtest.core.events import Finished, Tokens
from loadtest.workload.requests import PlannedRequest


def streamed_end(
    req: PlannedRequest,
    stream: Stream,
    facts: Counter[str],
    counter: TokenCounter,
    fixed_via: str | None,
    now: Callable[[], int],
) -> list[Tokens | Finished]:
    """A complete stream's tokens, one stamp each, and its end; and what it shows."""
    usage, chunks = stream.usage, stream.chunks
    served = usage_count(usage, "completion_tokens")
    if served is None and stream.closing_empty:
        chunks = chunks[:-1]  # no usage to say otherwise: a closing chunk is not a token
    mode = counter.learn(chunks, usage)
    token_stamps = counter.by_chunk(chunks, mode)
    if token_stamps is None:  # the tokenizer's count, reconciled to the server's
        token_stamps = counter.reconcile(
            counter.counted(chunks),
            usage,
            stream.chars,
            facts,
            req.output_tokens if stream.tool_calls else None,
        )
    if stream.reply_cut and req.history is not None:  # a session's next turn loses it
        facts["replies_cut"] += 1
    if req.ignore_eos and len(token_stamps) < req.output_tokens and fixed_via != "none":
        facts["short_outputs"] += 1
    prompt_tokens = usage_count(usage, "prompt_tokens")
    if counter.count and prompt_tokens is not None and prompt_tokens != req.input_tokens:
        facts["prompt_token_mismatch"] += 1
        facts["prompt_tokens_off"] += abs(prompt_tokens - req.input_tokens)
    per_chunk = mode is not None  # reasoning chunks have text: a chunk a token either way
    reasoning, first_answer = counter.reasoning(stream, token_stamps, per_chunk, facts)
    return [
        Tokens(tuple(token_stamps)),
        Finished(
            token_stamps[-1] if token_stamps else now(),
            len(token_stamps),
            prompt_tokens,
            stream.response_id,
            served,
            stream.answer if req.history is not None or req.keep_answer else None,
            reasoning,
            first_answer,
        ),
    ]


def unstreamed_end(
    req: PlannedRequest,
    stream: Stream,
    facts: Counter[str],
    counter: TokenCounter,
    fixed_via: str | None,
    now: Callable[[], int],
) -> list[Finished]:
    """An unstreamed answer's end: its tokens the server's usage (else its text counted
    with the tokenizer, else a chunk a token), all arrived with it, none stamped."""
    usage = stream.usage
    served = usage_count(usage, "completion_tokens")
    tokens = served
    if tokens is None:
        facts["answers_without_usage"] += 1
        tokens = sum(n for _, n in counter.counted(stream.chunks))
    prompt_tokens = usage_count(usage, "prompt_tokens")
    if counter.count and prompt_tokens is not None and prompt_tokens != req.input_tokens:
        facts["prompt_token_mismatch"] += 1
        facts["prompt_tokens_off"] += abs(prompt_tokens - req.input_tokens)
    if req.ignore_eos and tokens < req.output_tokens and fixed_via != "none":
        facts["short_outputs"] += 1
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    reasoning = usage_count(details, "reasoning_tokens") or 0
    return [
        Finished(
            now() if not stream.chunk_ns else stream.chunk_ns[-1],
            tokens,
            prompt_tokens,
            stream.response_id,
            served,
            stream.answer if req.history is not None or req.keep_answer else None,
            min(reasoning, tokens),
            None,
            streamed=False,
        )
    ]


def pooled_end(
    req: PlannedRequest,
    answer: tuple[int | None, str | None],
    facts: Counter[str],
    check_prompt: bool,
    now_ns: int,
) -> Finished:
    """A pooling API's one answer (its prompt tokens, its response id) ends its request, with
    no tokens. ``check_prompt``: its prompt tokens are compared with the plan's (embeddings,
    where the model's tokenizer made the prompts)."""
    prompt_tokens, response_id = answer
    planned = req.input_tokens * req.inputs  # each input as planned (not rerank's pairs)
    if check_prompt and prompt_tokens != planned:
        facts["prompt_token_mismatch"] += 1
        facts["prompt_tokens_off"] += abs((prompt_tokens or 0) - planned)
    return Finished(now_ns, 0, prompt_tokens, response_id)
