"""A static batch as generate() takes it: its prompts left-padded to one width (the prompt
bucket's multiple) at the warmed batch size, and generate()'s settings for it."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from loadtest.backends.base import Facts
from loadtest.backends.transformers import messages
from loadtest.backends.transformers.compiling import batch_bucket
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.json_types import ints_in, number_in

if TYPE_CHECKING:
    from torch import Tensor

    from loadtest.backends.transformers.padded_decode import PaddedDecode


def left_padded(
    torch: ModuleType, batch: list[messages.Req], info: Facts
) -> tuple[Tensor, Tensor, int]:
    """(ids, mask, width): each prompt right-aligned, so every row's next token lands in the
    last column, at the batch bucket's rows. The throw-away rows up to the warmed size are
    copies of the first, which under greedy decoding emit its tokens and so stop with it (at
    its EOS or its length): they add no steps, and nothing reads their tokens."""
    bucket = int(number_in(info, "prompt_bucket", 1)) or 1
    width = -(-max(len(r[2]) for r in batch) // bucket) * bucket  # up to the bucket
    buckets = ints_in(info, "batch_buckets")
    rows = batch_bucket(len(batch), buckets) if buckets else len(batch)
    ids = torch.full((rows, width), info.get("pad_token_id", 0), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, r in enumerate(batch):
        ids[i, width - len(r[2]) :] = torch.tensor(r[2], dtype=torch.long)
        mask[i, width - len(r[2]) :] = 1
    ids[len(batch) :], mask[len(batch) :] = ids[0], mask[0]
    return ids, mask, width


def generate_kwargs(
    spec: TransformersSpec,
    info: Facts,
    padded: PaddedDecode | None,
    width: int,
    max_new: int,
    ignore_eos: bool,
    eos: int | list[int] | None,
) -> dict[str, object]:
    """generate()'s settings for a batch of prompts ``width`` tokens wide."""
    kwargs: dict[str, object] = dict(
        max_new_tokens=max_new,
        do_sample=False,
        pad_token_id=info.get("pad_token_id", 0),
        eos_token_id=None if ignore_eos else eos,
    )
    if ignore_eos:
        kwargs["min_new_tokens"] = max_new
    if padded is not None:  # its own cache, at the decode steps' rows
        rows = int(number_in(info, "decode_batch_size"))
        kwargs.update(padded.generate_kwargs(rows, width + max_new))
    elif spec.compile:
        kwargs["cache_implementation"] = "static"
    return kwargs
