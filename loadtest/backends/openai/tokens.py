"""The served model's tokens, as the client sees them: the tokenizer it sizes prompts with,
fitting a synthetic chat message to its planned length inside the template, and one stamp per
output token, reconciled to the server's ``usage``.

Counting happens after a stream is done, never on the token path: stamps are the chunks'
arrival times, and a chunk's token count only says how many stamps it gets.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadtest.backends.openai.discovery import model_root
from loadtest.core.errors import BackendError
from loadtest.workload.tokenizer import ByteTokenizer

if TYPE_CHECKING:
    from loadtest.backends.openai.stream import Stream
    from loadtest.transport.settings import ClientSettings

FIT_TRIES = 8  # rounds to fit a synthetic chat message to its planned length in the template


def load_tokenizer(
    tokenizer: str | None,
    model: str,
    base_url: str,
    api_key: str | None,
    base_dir: Path,
    settings: ClientSettings | None = None,
) -> tuple[Any, str, Callable[[str], list[int]] | None]:
    """``backend.tokenizer``; else the served name; else where the server says it loaded the
    model from (``/v1/models``' ``root``: a served name is often not a folder or a hub id,
    ``--served-model-name tiny`` for ``/models/llama``). Returns the tokenizer, where it came
    from, and its text -> tokens function (None: no tokenizer, one token a chunk)."""
    name = tokenizer or model
    tok = _tokenizer_at(name, base_dir)
    if isinstance(tok, ByteTokenizer) and not tokenizer:
        root = model_root(base_url, model, api_key, settings=settings)
        if root is not None:
            tok = _tokenizer_at(root, base_dir)
            name = root if not isinstance(tok, ByteTokenizer) else name
    if isinstance(tok, ByteTokenizer):
        if tokenizer:
            raise BackendError(
                f"backend.tokenizer: no tokenizer found at {tokenizer!r} "
                "(a local directory, or a hub id in the cache or reachable on the hub)"
            )
        return (
            tok,
            f"none found for {name!r}: built-in bytes for prompts, one token per chunk",
            None,
        )
    return tok, getattr(tok, "name", name), tok.encode


def _tokenizer_at(name: str, base_dir: Path) -> Any:
    try:
        from loadtest.backends.hf_tokenizer import load_tokenizer as load_hf

        return load_hf(name, base_dir, trust_remote_code=False, download=True)
    except ImportError:  # no transformers installed: fine for an HTTP client
        return ByteTokenizer()


def fit_in_template(tok: Any, text: str, n: int, natural: bool = False) -> str:
    """A synthetic chat message whose rendered prompt is ``n`` tokens: inside the template its
    first and last tokens may merge with the template's text (``user: `` + ``hello``), so its
    length is checked there and trimmed or extended by the difference."""
    for extra in range(FIT_TRIES):
        rendered = tok.render_chat([{"role": "user", "content": text}])
        if rendered is None:
            return text
        off = len(tok.encode(rendered)) - n
        if off == 0:
            return text
        ids = tok.encode(text)
        rng = random.Random(n * FIT_TRIES + extra)
        if off > 0 and len(ids) - off < 1:  # as short as it goes: another token instead
            ids = tok.sample_ids(rng, 1, natural=natural)
        elif off > 0:
            ids = ids[: len(ids) - off]
        else:
            ids = ids + tok.sample_ids(rng, -off, natural=natural)
        text = tok.decode(ids)
    # the nearest found (a planned length under the template's own is out of reach): the
    # server's count is reported beside the plan's
    return text


def prompt_overhead(tokenizer: Any, templated: bool) -> int:
    """Tokens the server adds to a prompt's text: the special tokens its tokenizer adds
    (completions, embeddings), or what the chat template wraps a user message in (chat, the
    Responses API)."""
    if not templated:
        return max(0, tokenizer.special_tokens_added())
    sample = tokenizer.decode(tokenizer.sample_ids(random.Random(0), 16, natural=True))
    rendered = tokenizer.render_chat([{"role": "user", "content": sample}])
    if rendered is None:  # no template here: the server's own, unknown to the client
        return 0
    return max(0, len(tokenizer.encode(rendered)) - len(tokenizer.encode(sample)))


def usage_count(usage: object, key: str) -> int | None:
    """A token count from a server's ``usage``, if it is a sane integer."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def stamps(chunks: Iterable[tuple[int, int]]) -> list[int]:
    """Each chunk's arrival, once per token it holds."""
    out: list[int] = []
    for t, n in chunks:
        out.extend([t] * n)
    return out


class TokenCounter:
    """Output tokens from a stream's chunks: ``count`` is the model's text -> tokens (None: no
    tokenizer, one token a chunk with text)."""

    def __init__(self, count: Callable[[str], list[int]] | None, now: Callable[[], int]) -> None:
        self.count = count
        self._now = now
        # how the server streams tokens, as its last finished stream showed ("all", "text",
        # None: ``learn``); a stream cut short, with no usage, is counted the same way
        self.chunking: str | None = None

    def learn(self, chunks: list[tuple[int, str]], usage: object) -> str | None:
        """How a finished stream's tokens were chunked, by its usage: a chunk a token ("all"),
        a chunk a token where a chunk has text ("text": its closing chunk carried only the
        finish reason), or neither (None; None without usage, and then nothing is learned)."""
        served = usage_count(usage, "completion_tokens")
        if served is None:
            return None
        with_text = sum(1 for _, text in chunks if text)
        mode = "all" if served == len(chunks) else "text" if served == with_text else None
        self.chunking = mode
        return mode

    @staticmethod
    def by_chunk(chunks: list[tuple[int, str]], mode: str | None) -> list[int] | None:
        """A stamp a token where ``mode`` says a chunk is a token (every chunk, or every chunk
        with text): nothing to count; None where it does not say."""
        if mode == "all":
            return [t for t, _ in chunks]
        if mode == "text":
            return [t for t, text in chunks if text]
        return None

    def partial(self, chunks: list[tuple[int, str]]) -> list[int]:
        """A stream cut short: a stamp a token, by the server's way of chunking where a
        finished stream showed it (a word piece's text alone may tokenize into two), else by
        the tokenizer's count of each chunk's text."""
        by_chunk = self.by_chunk(chunks, self.chunking)
        return stamps(self.counted(chunks)) if by_chunk is None else by_chunk

    def counted(self, chunks: list[tuple[int, str]]) -> list[tuple[int, int]]:
        """Each chunk's tokens by its text: the model's tokenizer where there is one (a chunk
        may hold several), else one a chunk with text; 0 for a chunk with no text."""
        count = self.count
        if count is None:
            return [(t, 1 if text else 0) for t, text in chunks]
        return [(t, max(1, len(count(text))) if text else 0) for t, text in chunks]

    def reconcile(
        self,
        chunks: list[tuple[int, int]],
        usage: object,
        chars: int,
        facts: Counter,
        withheld_cap: int | None = None,
    ) -> list[int]:
        """One stamp per token, agreeing with the server's count when it gives one.

        A server that streams a chunk per token (vLLM, TGI) has as many chunks as tokens: each
        chunk is then one token, stamped at its arrival, whatever the client's tokenizer makes
        of its text (a word piece alone may tokenize into two). Otherwise tokens the text does
        not account for go first to the chunks that came with no text, at their own arrival,
        then to the last chunk; an over-count is taken from multi-token chunks, latest first.
        Without ``usage``, a chunk with no text is taken as one token. ``withheld_cap``: the
        server streamed only part of what it generated (a tool parser keeps the call's markup
        back), so its count is plausible up to the tokens asked for, whatever the text."""
        served = usage_count(usage, "completion_tokens")
        if served is None:
            return stamps([(t, n or 1) for t, n in chunks])
        if served == len(chunks):
            return [t for t, _ in chunks]
        counted = sum(n for _, n in chunks)
        if served == counted:
            return stamps(chunks)
        plausible = (
            served <= withheld_cap
            if withheld_cap is not None
            else self.plausible(served, counted, chunks, chars)
        )
        if not plausible:
            facts["usage_implausible"] += 1
            facts["usage_implausible_reported"] += served
            facts["usage_implausible_streamed"] += counted
            return stamps([(t, n or 1) for t, n in chunks])
        facts["usage_reconciled"] += 1
        counts = [n for _, n in chunks]
        missing = served - counted
        for i, n in enumerate(counts):
            if missing <= 0:
                break
            if n == 0:
                counts[i], missing = 1, missing - 1
        if missing > 0:
            last = [(chunks[-1][0] if chunks else self._now(), missing)]
            return stamps([(t, n) for (t, _), n in zip(chunks, counts)] + last)
        excess = -missing
        for i in range(len(counts) - 1, -1, -1):
            take = min(excess, counts[i] - 1)
            if take > 0:
                counts[i] -= take
                excess -= take
        return stamps([(t, n) for (t, _), n in zip(chunks, counts)])

    def plausible(
        self, served: int, counted: int, chunks: list[tuple[int, int]], chars: int
    ) -> bool:
        """Could the server really have generated ``served`` tokens for what it streamed? Each
        chunk with text holds at least one token; a token is at least one character, but for
        the chunks with no text (special tokens, parts of characters) and a few more; with the
        model's tokenizer the count is close, within a quarter. Past that the server's count
        is not trusted (1000 reported against 8 streamed would multiply tok/s by 125)."""
        empty = sum(1 for _, n in chunks if not n)
        slack = 4 + empty
        if served < len(chunks) - empty:
            return False
        if self.count is not None:
            return served <= counted + max(slack, counted // 4)
        return served <= chars + slack

    def reasoning(
        self, stream: Stream, token_stamps: list[int], per_chunk: bool, facts: Counter
    ) -> tuple[int, int | None]:
        """Output tokens that were reasoning, and when the first answer token (not reasoning)
        arrived, None where none did. Streamed reasoning is counted as the stream's tokens are
        (a chunk a token where the server streams so), and a usage count that differs is
        counted as a problem; reasoning the server did not stream (a hidden chain of thought)
        is its usage's count, and the answer's first token is then the first streamed."""
        usage = stream.usage if isinstance(stream.usage, dict) else {}
        served = usage_count(usage.get("completion_tokens_details"), "reasoning_tokens")
        total = len(token_stamps)
        if not stream.reasoning:
            if served and token_stamps:
                return min(served, total), token_stamps[0]
            return 0, stream.first_answer_ns
        streamed = (
            len(stream.reasoning)
            if per_chunk
            else sum(n or 1 for _, n in self.counted(stream.reasoning))
        )
        if served is not None and served != streamed:
            facts["reasoning_usage_mismatch"] += 1
        # counted from text, the split is approximate: it keeps to what the stream showed (no
        # answer chunk: all reasoning; one: at least a token of answer)
        if stream.first_answer_ns is None:
            return total, None
        return min(streamed, total - 1), stream.first_answer_ns
