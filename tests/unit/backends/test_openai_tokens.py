"""The HTTP client's token accounting, by hand: one stamp per token, agreeing with the server's
usage, and tokens that stream with no text stamped at their own chunk's arrival."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("aiohttp")

from loadtest.backends.openai.events import tokens_in
from loadtest.backends.openai.tokens import TokenCounter


def backend() -> TokenCounter:
    """Counting without the model's tokenizer: a chunk with text is a token."""
    return TokenCounter(None, lambda: 0)


def test_reconcile_to_the_servers_count():
    b, facts = backend(), Counter()
    chunks = [(10, 1), (20, 2), (30, 1)]  # the client counted 4 tokens in 3 chunks
    chars = 12  # characters streamed: without a tokenizer, the most tokens a server can claim + 4
    assert b.reconcile(chunks, {"completion_tokens": 4}, chars, facts) == [10, 20, 20, 30]
    # a chunk per token: each chunk is one token, whatever the client's tokenizer said
    assert b.reconcile(chunks, {"completion_tokens": 3}, chars, facts) == [10, 20, 30]
    # generated but not streamed as text: at the end
    assert b.reconcile(chunks, {"completion_tokens": 6}, chars, facts) == [10, 20, 20, 30, 30, 30]
    # over-counted: taken from the latest multi-token chunk
    assert b.reconcile([(10, 3), (20, 3)], {"completion_tokens": 5}, chars, facts) == [
        10, 10, 10, 20, 20,
    ]  # fmt: skip
    assert b.reconcile(chunks, None, chars, facts) == [10, 20, 20, 30]
    assert facts == Counter(usage_reconciled=2)  # agreements are not counted
    # Not plausible: 1000 tokens claimed for 12 characters, or fewer tokens than chunks with text.
    assert b.reconcile(chunks, {"completion_tokens": 1000}, chars, facts) == [10, 20, 20, 30]
    assert b.reconcile(chunks, {"completion_tokens": 2}, chars, facts) == [10, 20, 20, 30]
    assert facts["usage_implausible"] == 2 and facts["usage_reconciled"] == 2


def test_tokens_with_no_text_keep_their_own_arrival():
    """A special token or the first bytes of a character stream as a chunk with no text: its
    token is stamped when that chunk came, never all at the last chunk (zero gaps)."""
    b, facts = backend(), Counter()
    chunks = [(10, 1), (15, 0), (20, 1), (25, 0), (30, 1)]
    chars = 3
    # five chunks, five tokens: one a chunk
    assert b.reconcile(chunks, {"completion_tokens": 5}, chars, facts) == [10, 15, 20, 25, 30]
    # four tokens: the first chunk with no text had one
    assert b.reconcile(chunks, {"completion_tokens": 4}, chars, facts) == [10, 15, 20, 30]
    # no usage: a chunk with no text is taken as a token
    assert b.reconcile(chunks, None, chars, facts) == [10, 15, 20, 25, 30]
    # more than the chunks: the rest at the end
    assert b.reconcile(chunks, {"completion_tokens": 7}, chars, facts) == [
        10, 15, 20, 25, 30, 30, 30,
    ]  # fmt: skip


def test_which_events_carry_a_token():
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    empty = {"choices": [{"delta": {"content": ""}, "finish_reason": None}]}
    text = {"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}
    usage = {"choices": [], "usage": {"completion_tokens": 3}}
    assert tokens_in(role, "chat")[0] is None  # chat's opening chunk: the role, no token yet
    assert tokens_in(empty, "chat")[0] == ""  # a token with no text
    assert tokens_in(text, "chat")[:3] == ("hi", None, "hi")
    assert tokens_in(usage, "chat")[0] is None
    done = {"choices": [{"text": "", "finish_reason": "stop"}]}
    assert tokens_in(done, "completions")[:3] == ("", "stop", None)
    # without a tokenizer a chunk with text is one token, one with none is counted 0 (for now)
    assert backend().counted([(1, "ab"), (2, ""), (3, "c")]) == [(1, 1), (2, 0), (3, 1)]
