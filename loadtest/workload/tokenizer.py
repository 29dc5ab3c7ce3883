"""Token counting for backends without a tokenizer of their own: a byte-level tokenizer.

One token per UTF-8 byte (ids 0..255) plus BOS (256) and EOS (257), so token counts are always
defined and a multi-byte character is several tokens, as with real byte-level BPE fallbacks.
The :class:`Tokenizer` protocol is what the workload needs from any tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol


class Tokenizer(Protocol):
    """What the plan needs of a tokenizer: counts, chat rendering and seeded random prompts."""

    vocab_size: int
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def render_chat(self, messages: list[dict]) -> str | None:
        """The prompt text for a chat, or None when there is no chat template."""

    def random_prompt_ids(self, rng: random.Random, n: int, keep: Sequence[int] = ()) -> list[int]:
        """``n`` ids of ordinary (non-special) tokens, the first of them ``keep`` (a shared
        prefix), whose text tokenizes back to the same ids."""


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

    def random_prompt_ids(self, rng: random.Random, n: int, keep: Sequence[int] = ()) -> list[int]:
        # Printable ASCII: a synthetic prompt that reads as text when logged.
        return list(keep) + rng.choices(_PRINTABLE, k=max(0, self._bytes(n) - len(keep)))

    def _bytes(self, n: int) -> int:
        return n


class ScaledByteTokenizer(ByteTokenizer):
    """Bytes, with synthetic prompts scaled to the server's tokens: where the model's tokenizer
    is not here but the server counts text (``/tokenize``), an n-token prompt is
    ``n × bytes_per_token`` bytes of the same printable text the server's count was taken on."""

    def __init__(self, bytes_per_token: float) -> None:
        self.bytes_per_token = bytes_per_token
        self.name = f"loadtest-bytes scaled by the server ({bytes_per_token:.3g} bytes a token)"

    def _bytes(self, n: int) -> int:
        return max(1, round(n * self.bytes_per_token))


def render_messages_plainly(messages: list[dict]) -> str:
    """The fallback rendering of a chat when the model has no template: ``role: content`` lines."""
    return (
        "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)
        + "\nassistant:"
    )
