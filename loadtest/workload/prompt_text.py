"""A planned request's synthetic prompt: its token ids, made from its seed when it is sent.

Natural text (passages of the corpus) or random token ids; a shared prefix's group opens it
with that group's seeded prefix; a replayed trace's request is its prompt blocks in order,
each block's text seeded by its hash id alone, so prompts whose blocks start alike share
exactly that prefix.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field

from loadtest.workload.tokenizer import Tokenizer

BLOCK_CACHE = 4096  # trace blocks kept tokenized (2 MB of ids at 512 tokens a block)


@dataclass
class PromptText:
    """How a plan's synthetic prompts are made (the same for every request of it)."""

    natural: bool = True  # passages of the corpus (else random token ids)
    prefix: tuple[int, int] | None = None  # shared_prefix: (tokens, seed of group 0's prefix)
    block_tokens: int = 512  # a trace's prompt blocks: tokens a hash id names
    block_seed: int = 0  # seeds each block's text (with its hash id)
    # hash id -> its block's ids, for ``_blocks_of``'s tokenizer; not sent to workers
    _blocks: OrderedDict[int, list[int]] = field(
        default_factory=OrderedDict, repr=False, compare=False
    )
    _blocks_of: object = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_blocks": OrderedDict(), "_blocks_of": None}

    def ids(
        self,
        tokenizer: Tokenizer,
        n: int,
        seed: int,
        blocks: tuple[int, ...] | None = None,
        prefix_group: int | None = None,
    ) -> list[int]:
        """A request's synthetic prompt, ``n`` tokens from its ``seed``: its trace ``blocks``
        (the result may be otherwise long: their text re-tokenized where the tokenizer merges
        them), or opened by its ``prefix_group``'s prefix, or all its own."""
        rng = random.Random(seed)
        if blocks:
            return self._block_prompt(blocks, tokenizer, n, rng)
        natural = self.natural
        if prefix_group is not None and self.prefix is not None:
            tokens, prefix_seed = self.prefix
            shared = tokenizer.sample_ids(
                random.Random(prefix_seed + prefix_group), tokens, natural=natural
            )
            return tokenizer.sample_ids(rng, max(n, tokens), keep=shared, natural=natural)
        return tokenizer.sample_ids(rng, n, natural=natural)

    def _block_prompt(
        self, blocks: tuple[int, ...], tokenizer: Tokenizer, n: int, rng: random.Random
    ) -> list[int]:
        """A trace request's prompt: its blocks' tokens in order, cut to ``n`` (a prompt longer
        than its blocks goes on with text of its own). The blocks are each a fixed point of the
        tokenizer and start on a space, so joined they tokenize as apart; where a tokenizer
        merges them anyway, the prompt is its re-tokenized text."""
        ids: list[int] = []
        for h in blocks:
            if len(ids) >= n:
                break
            ids.extend(self._block(h, tokenizer))
        if len(ids) < n:
            ids.extend(tokenizer.sample_ids(rng, n - len(ids), natural=self.natural))
        ids = ids[:n]
        again = tokenizer.encode(tokenizer.decode(ids))
        return ids if again == ids else again

    def _block(self, h: int, tokenizer: Tokenizer) -> list[int]:
        """A hash id's block of tokens (the last few thousand kept: a trace reuses its blocks)."""
        if self._blocks_of is not tokenizer:
            self._blocks.clear()
            self._blocks_of = tokenizer
        ids = self._blocks.get(h)
        if ids is None:
            seed = random.Random(f"{self.block_seed}/{h}")
            ids = tokenizer.sample_ids(seed, self.block_tokens, natural=self.natural)
            self._blocks[h] = ids
            if len(self._blocks) > BLOCK_CACHE:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(h)
        return ids
