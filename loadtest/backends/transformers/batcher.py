"""The static batcher: how an engine's next batch forms from its inbox. Up to max_batch_size
requests, waiting at most max_wait_ms after the first (one at a time in ``single`` mode);
control messages are taken as they come, ahead of the requests (behind a stream of requests
they would wait forever); a stop ends the batch it arrives behind, and is kept for after it."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from loadtest.backends.transformers import messages
from loadtest.config.transformers_spec import TransformersSpec


def next_batch(
    inbox: queue.Queue, spec: TransformersSpec, control: Callable[[messages.Inbound], bool]
) -> list[messages.Req] | None:
    """The next batch; None at a stop; an empty one where the inbox gave a control message
    (``control`` took it: True) and nothing else."""
    single = spec.mode == "single"
    max_bs = 1 if single else spec.max_batch_size
    max_wait = 0.0 if single else spec.max_wait_ms / 1000
    msg = inbox.get()
    if msg[0] == "stop":
        return None
    if control(msg):
        return []
    batch = [msg]
    deadline = time.monotonic() + max_wait
    while len(batch) < max_bs:
        try:
            nxt = inbox.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if nxt[0] != "req":
            if nxt[0] != "stop" and control(nxt):
                continue
            inbox.put(nxt)  # stop: after this batch
            break
        batch.append(nxt)
    return batch
