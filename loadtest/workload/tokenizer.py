"""Token counting for backends without a tokenizer of their own: a byte-level tokenizer.

One token per UTF-8 byte (ids 0..255) plus BOS (256) and EOS (257), so token counts are always
defined and a multi-byte character is several tokens, as with real byte-level BPE fallbacks.
The :class:`Tokenizer` protocol is what the workload needs from any tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from loadtest.workload import corpus


class Tokenizer(Protocol):
    """What the plan needs of a tokenizer: counts, chat rendering and seeded random prompts."""

    vocab_size: int
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def render_chat(self, messages: list[dict]) -> str | None:
        """The prompt text for a chat, or None when there is no chat template."""

    def sample_ids(
        self, rng: random.Random, n: int, keep: Sequence[int] = (), natural: bool = False
    ) -> list[int]:
        """``n`` seeded ids of ordinary (non-special) tokens, the first of them ``keep`` (a
        shared prefix), whose text tokenizes back to the same ids: a passage of the corpus
        (``natural``), or ids drawn at random."""


_PRINTABLE = range(32, 127)


class ByteTokenizer:
    """One token a byte (plus BOS and EOS): exact counts with no model at all."""

    vocab_size: int = 258
    bos_token_id = 256
    eos_token_id: int | None = 257
    name = "loadtest-bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def render_chat(self, messages: list[dict]) -> str | None:
        return None

    prompt_overhead = 0  # tokens a server adds around a prompt's text (none known here)

    def sample_ids(
        self, rng: random.Random, n: int, keep: Sequence[int] = (), natural: bool = False
    ) -> list[int]:
        k = max(0, self._bytes(n, natural) - len(keep))
        if natural:  # the corpus is ASCII: a character is a byte
            return list(keep) + list(corpus.passage(corpus.word_start(rng), k).encode("ascii"))
        # printable ASCII: a random prompt that still reads as characters when logged
        return list(keep) + rng.choices(_PRINTABLE, k=k)

    def _bytes(self, n: int, natural: bool) -> int:
        return n


class ScaledByteTokenizer(ByteTokenizer):
    """Bytes, with synthetic prompts scaled to the server's tokens: where the model's tokenizer
    is not here but the server counts text (``/tokenize``), an n-token prompt is
    ``n × bytes a token`` bytes, by the server's count on the same kind of text (a passage of
    the corpus, or random printable characters: they differ by about three times)."""

    def __init__(self, bytes_per_token: float, natural_bytes_per_token: float) -> None:
        self.bytes_per_token = bytes_per_token
        self.natural_bytes_per_token = natural_bytes_per_token
        self.name = (
            f"loadtest-bytes scaled by the server ({natural_bytes_per_token:.3g} bytes a token "
            f"of natural text, {bytes_per_token:.3g} of random characters)"
        )

    def _bytes(self, n: int, natural: bool) -> int:
        per = self.natural_bytes_per_token if natural else self.bytes_per_token
        return max(1, round(n * per))


def render_messages_plainly(messages: list[dict]) -> str:
    """The fallback rendering of a chat when the model has no template: ``role: content`` lines."""
    return (
        "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)
        + "\nassistant:"
    )
