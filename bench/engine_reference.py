"""The reference the harness is judged against, run inside the engine worker through its hook
(``TransformersBackend.call_in_engine("engine_reference:bare_generate", ...)``)."""

from __future__ import annotations

import time

from loadtest.backends.transformers.batch_inputs import generate_kwargs


def bare_generate(engine, batch_size: int, prompt_len: int, new_tokens: int, reps: int) -> list:
    """``reps`` generate() calls as a user's own loop makes them on a batch of this shape
    (inputs already on the device, the engine's own generate settings, fixed length), with no
    streamer, stamps or messages. Seconds per call, each from the call to the device being idle
    after it."""
    torch = engine.torch
    ids = torch.full((batch_size, prompt_len), 65, dtype=torch.long).to(engine.device)
    mask = torch.ones_like(ids)
    kwargs = generate_kwargs(
        engine.spec, engine.info, engine.padded, prompt_len, new_tokens, True, None
    )
    cuda = engine.device.type == "cuda"
    seconds = []
    with torch.inference_mode():
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize(engine.device)
            t = time.perf_counter()
            engine.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            if cuda:
                torch.cuda.synchronize(engine.device)
            seconds.append(time.perf_counter() - t)
    return seconds
