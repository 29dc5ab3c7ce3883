"""An encoder's batch (``api: embeddings``): one forward pass over every text of the batch's
requests, each text's vector its hidden states' mean over its tokens."""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from loadtest.backends.base import Facts
from loadtest.backends.transformers import messages

if TYPE_CHECKING:
    from torch import device as TorchDevice
    from transformers import PreTrainedModel

    from loadtest.backends.transformers.stamping import Out


class Loaded(Protocol):
    """What an embedding batch needs of the engine: the model where it was loaded."""

    @property
    def torch(self) -> ModuleType: ...

    @property
    def info(self) -> Facts: ...

    @property
    def device(self) -> TorchDevice: ...

    @property
    def model(self) -> PreTrainedModel: ...


def embed_batch(engine: Loaded, batch: list, out: Out) -> None:
    """Embed ``batch`` (requests whose prompt ids are a list of texts' ids), right-padded, in
    one forward pass. A request is done when the vectors are on the host: they are copied
    there, which waits for the device."""
    torch = engine.torch
    texts = [ids for r in batch for ids in r[2]]
    width = max(len(ids) for ids in texts)
    pad = engine.info.get("pad_token_id", 0) or 0
    ids = torch.full((len(texts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(texts), width), dtype=torch.long)
    for i, row in enumerate(texts):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    ids, mask = ids.to(engine.device), mask.to(engine.device)
    with torch.inference_mode():
        hidden = engine.model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
        pooled.float().cpu()
    t = time.monotonic_ns()
    for r in batch:
        out.send(messages.done(t, r[1], 0))
