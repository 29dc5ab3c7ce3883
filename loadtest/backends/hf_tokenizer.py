"""A Hugging Face tokenizer behind loadtest's ``Tokenizer`` protocol (used in the harness process)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loadtest.workload import corpus

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from loadtest.workload.tokenizer import Tokenizer

FIT_TRIES = 12  # re-encode rounds before a prompt's text is taken as the nearest found


class HFTokenizer:
    """A Hugging Face tokenizer behind loadtest's Tokenizer protocol."""

    # tokens a server adds to a prompt of text: its BOS, a chat template (set by the client)
    prompt_overhead = 0

    def __init__(self, tok: PreTrainedTokenizerBase) -> None:
        self._tok = tok
        self.name = getattr(tok, "name_or_path", "hf")
        self.vocab_size = len(tok)
        self.eos_token_id = tok.eos_token_id
        self._special = set(tok.all_special_ids)
        self._ordinary = [i for i in range(self.vocab_size) if i not in self._special]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        text = self._tok.decode(list(ids), skip_special_tokens=True)
        assert isinstance(text, str)  # one sequence in, one text out
        return text

    def render_chat(self, messages: list[dict]) -> str | None:
        """Chat messages as the model's chat template renders them, tokenized."""
        if not getattr(self._tok, "chat_template", None):
            return None
        text = self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert isinstance(text, str)  # tokenize=False: the rendered text
        return text

    def special_tokens_added(self) -> int:
        """Tokens the tokenizer adds around a text when asked to (a BOS, say): what a
        server's completions API counts beyond the text's own."""
        return len(self._tok.encode("a", add_special_tokens=True)) - len(self.encode("a"))

    def sample_ids(
        self, rng: random.Random, n: int, keep: Sequence[int] = (), natural: bool = False
    ) -> list[int]:
        """``n`` seeded token ids, starting with ``keep``, that are exactly what their text
        tokenizes to: a prompt sent as text is then ``n`` tokens to the server too, and a shared
        prefix the same tokens in every prompt. The ids are a passage of the corpus
        (``natural``), or drawn at random from the ordinary (non-special) vocabulary.

        Ids cut from a longer text, or drawn at random, may decode to text that re-tokenizes
        differently (neighbours merge, a byte sequence splits), so they are re-encoded and
        trimmed or extended until they are a fixed point, as vLLM's benchmark does."""
        draw = self._passage if natural else self._random
        ids = list(keep) + draw(rng, n - len(keep))
        for _ in range(FIT_TRIES):
            again = self.encode(self.decode(ids))
            if again == ids:
                return ids
            # text that spells a special token ("<s>") is read as it by a server: redrawn
            again = [i if i not in self._special else rng.choice(self._ordinary) for i in again]
            if list(again[: len(keep)]) != list(keep):  # the prefix merged into what follows
                again = list(keep) + draw(rng, n - len(keep))
            ids = again[:n] + draw(rng, n - len(again))
        return self.encode(self.decode(ids))  # the nearest: its length is reported by the server

    def _random(self, rng: random.Random, k: int) -> list[int]:
        return rng.choices(self._ordinary, k=max(0, k))

    def _passage(self, rng: random.Random, k: int) -> list[int]:
        """The first ``k`` tokens of a seeded passage of the corpus."""
        if k <= 0:
            return []
        start, chars = corpus.word_start(rng), 4 * k + 32  # English runs ~4 characters a token
        while True:
            ids = self.encode(corpus.passage(start, chars))
            if len(ids) > k:  # cut inside the text: its last token is a whole one
                return ids[:k]
            chars *= 2


def load_tokenizer(
    model: str, base_dir: str | Path, trust_remote_code: bool, download: bool = False
) -> Tokenizer:
    """The model's tokenizer, or the built-in byte tokenizer where it has none (dummy models).

    A local folder first, then the hub's local cache; with ``download``, then the hub itself
    (not when ``HF_HUB_OFFLINE`` is set: huggingface_hub's own switch, honoured as it means)."""
    from loadtest.workload.tokenizer import ByteTokenizer

    if model.startswith("dummy:"):
        return ByteTokenizer()
    import transformers

    path = Path(model).expanduser()
    if not path.is_absolute() and (Path(base_dir) / path).is_dir():
        path = Path(base_dir) / path
    target = str(path) if path.is_dir() else model
    tries = [True]
    if download and not path.is_dir() and not _offline() and _on_the_hub(model):
        tries.append(False)
    for local_only in tries:
        try:
            tok = transformers.AutoTokenizer.from_pretrained(
                target, local_files_only=local_only, trust_remote_code=trust_remote_code
            )
        except (OSError, ValueError):  # not there (or, online: no such repo, no network)
            continue
        return HFTokenizer(tok)
    return ByteTokenizer()


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


def _on_the_hub(model: str) -> bool:
    """Whether the hub answers for this repo id within seconds. Asked once, without retries,
    before a download: transformers' own download retries for about a minute when the hub
    cannot be reached, which a run start must not wait on."""
    if not _HUB_ID.match(model):
        return False
    try:
        import huggingface_hub

        huggingface_hub.HfApi().model_info(model, timeout=5)
    except Exception:  # unreachable, no such repo, gated: no download to try
        return False
    return True


def _offline() -> bool:
    import os

    return os.getenv("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
