"""The pipelined decode loop: greedy decoding of a padded batch (``pad_decode``) with the device
never waiting for the host.

transformers' ``generate()`` ends every step with a wait for the device (its stop check reads
the step's result on the host), then does its own host work for the next step (inputs, the
causal mask, logits processing, stopping criteria: dozens of small launches and their Python),
so a step costs the host's time plus the device's. With a compiled step that is most of it: on
an H200 an 8B model's compiled step took 7.6 ms against a 3.4 ms memory floor, and splitting it
over two GPUs (TP=2) saved 0.8 ms of it (docs/benchmarks.md §10). Here the whole decode step
(forward, argmax, the next position) is one compiled call that reads and writes fixed buffers,
so the host's part of a step is one call, and step n+1 is queued before the host waits for step
n's tokens: the device runs step after step, and each token is stamped as soon as its step is
done and its tokens are on the host (the step's own event, not a later one).

The price is one step more than needed when every row stops at an end-of-sequence token (the
host learns of it a step late): a step the device runs and nobody reads. Rows that stop at their
length stop on time. Tensor-parallel followers run this loop with the same inputs; their stop
decisions, made from the same tokens by the same rule, line up with rank 0's step for step.

It decodes greedily, as the engine always does, and gives generate()'s tokens
(tests/unit/backends/test_decode_loop.py); a model whose generation config asks generate() for
logits processing (a repetition penalty, suppressed tokens, ...) decodes through generate()
(``loop_problem``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from loadtest.config.transformers_spec import TransformersSpec

if TYPE_CHECKING:
    from torch import Tensor
    from transformers import Cache, PreTrainedModel

    from loadtest.backends.transformers.padded_decode import PaddedDecode

# generate()'s greedy settings this loop does not apply: where a model's generation config sets
# one of these away from its default, it decodes through generate() (``loop_problem``).
PROCESSOR_FIELDS = (
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "min_length",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "sequence_bias",
    "guidance_scale",
    "watermarking_config",
)

# The stamp source (the result's stamp_source) of a pipelined engine.
PIPELINED = "each decode step's own event (pipelined loop)"

# Host buffers a step's tokens are copied into: step n's copy is queued before step n-1's is read.
RING = 3


def loop_problem(model: PreTrainedModel) -> str | None:
    """Why this model must decode through generate() (None: the pipelined loop gives its
    tokens): transformers before 5, or logits processing its generation config asks for."""
    import transformers
    from transformers import GenerationConfig

    if int(transformers.__version__.split(".")[0]) < 5:
        return f"transformers {transformers.__version__} (the pipelined loop needs 5 or later)"
    config, default = model.generation_config, GenerationConfig()
    odd = [
        f
        for f in PROCESSOR_FIELDS
        if getattr(config, f, None) not in (None, getattr(default, f, None))
    ]
    if odd:
        return f"its generation config asks for logits processing ({', '.join(odd)})"
    return None


def decode_loop_of(
    model: PreTrainedModel, spec: TransformersSpec, pad_decode: bool
) -> tuple[str, str | None]:
    """The loop a batch decodes in (``pipelined`` or ``generate()``) and why not pipelined: it
    runs padded decode steps (``pad_decode``) of a model ``loop_problem`` lets through, unless
    the scenario says ``decode_loop: generate`` (an error where it asked for pipelined)."""
    wanted = spec.decode_loop
    if wanted == "generate":
        return "generate()", "the scenario's decode_loop: generate"
    why = None if pad_decode else "its decode steps are not padded (pad_decode)"
    why = why or loop_problem(model)
    if why and wanted == "pipelined":
        raise ValueError(f"backend.decode_loop: {spec.model} cannot decode pipelined: {why}")
    return ("generate()", why) if why else ("pipelined", None)


def _compiles(model: PreTrainedModel) -> bool:
    """Whether generate() would compile this model's decode steps on its device: on CUDA (and
    the other accelerators transformers names), or where its compile config says all devices."""
    config = getattr(model.generation_config, "compile_config", None)
    return model.device.type in ("cuda", "xpu") or bool(
        getattr(config, "_compile_all_devices", False)
    )


def _step(
    model: PreTrainedModel,
    cache: Cache,
    cache_arg: str,
    token: Tensor,
    position: Tensor,
    mask: Tensor,
    cache_position: Tensor | None,
) -> None:
    """One decode step at every row: the next token of each, written over its last (``token``),
    and every row's position one on. All state is in these buffers (static addresses), so a
    CUDA graph of this call replays with no input copied."""
    kwargs: dict[str, object] = {cache_arg: cache}
    if cache_position is not None:
        kwargs["cache_position"] = cache_position
    logits = model(
        input_ids=token[:, None],
        position_ids=position[:, None],
        attention_mask=mask,
        use_cache=True,
        **kwargs,
    ).logits
    token.copy_(logits[:, -1].argmax(-1))
    position.add_(1)
    if cache_position is not None:
        cache_position.add_(1)


class PipelinedDecode:
    """The pipelined loop around one model and its padded decode (``PaddedDecode``): buffers
    and the compiled step are made for each cache the padded decode gives (one a sweep point)."""

    def __init__(self, model: PreTrainedModel, padded: PaddedDecode) -> None:
        import torch

        self.torch, self.model, self.padded = torch, model, padded
        forward = inspect.signature(model.forward).parameters
        self._cache_position = "cache_position" in forward  # before transformers 5.2x
        self._keep = "logits_to_keep" in forward
        self._compiled: Callable | None = None
        self._compiled_for: object = None  # the compile config it was compiled with
        self._for: object = None  # the cache the buffers below were made for
        self._bufs: tuple = ()
        self._host: Tensor | None = None  # (RING, rows) host buffers, pinned on CUDA
        self._events: list = []

    def _step_call(self) -> Callable:
        """The decode step as generate() would run it: compiled with the model's compile config
        (read at each batch, as generate() reads it) where generate() compiles, else eager."""
        if not _compiles(self.model):
            return _step
        config = self.model.generation_config.compile_config
        if self._compiled is None or self._compiled_for is not config:
            options = config.to_dict() if config is not None else {}
            self._compiled, self._compiled_for = self.torch.compile(_step, **options), config
        return self._compiled

    def _buffers(self, rows: int, length: int) -> tuple:
        torch, cache, device = self.torch, self.padded.cache, self.model.device
        if self._for is not cache:  # a new cache: new buffers (and, compiled, a new graph)
            token = torch.zeros(rows, dtype=torch.long, device=device)
            position = torch.zeros(rows, dtype=torch.long, device=device)
            mask = torch.zeros((rows, length), dtype=torch.long, device=device)
            cpos = torch.zeros(1, dtype=torch.long, device=device) if self._cache_position else None
            for t in (token, position, mask, cpos):
                if t is not None:
                    torch._dynamo.mark_static_address(t)
            self._bufs, self._for = (token, position, mask, cpos), cache
            cuda = device.type == "cuda"
            self._host = torch.zeros((RING, rows), dtype=torch.long, pin_memory=cuda)
            self._events = [torch.cuda.Event() if cuda else None for _ in range(RING)]
        return self._bufs

    def run(
        self,
        ids: Tensor,
        mask: Tensor,
        caps: list[int],
        eos: Iterable[int] | None,
        steps: int,
        stamp: Callable[[int, Tensor], None] | None = None,
    ) -> int:
        """Decode the batch (``ids``/``mask`` on the model's device, left-padded; the first
        ``len(caps)`` rows real, any more throw-away copies) for at most ``steps`` tokens, the
        prefill's included, in the padded decode's current cache (``generate_kwargs`` made it
        ready). A real row ends at its cap or at a token of ``eos``; the loop ends when every
        real row has. ``stamp(t, tokens)`` after each step, the real rows' tokens on the host
        (valid during the call only). Returns the steps run, the one nobody reads included."""
        torch = self.torch
        rows, length = self.padded.shape
        real, width = len(caps), ids.shape[1]
        stops = set(eos or ())
        ended = [False] * real
        with torch.inference_mode():  # where generate_kwargs made the cache
            token, position, full_mask, cpos = self._buffers(rows, length)
            first, last_pos = self._prefill(ids, mask)
            n = ids.shape[0]
            token[:n], token[n:] = first, first[0]
            position[:n], position[n:] = last_pos + 1, last_pos[0] + 1
            full_mask[:n, :width], full_mask[:n, width:] = mask, 1
            full_mask[n:] = full_mask[0]
            if cpos is not None:
                cpos.fill_(width)
            self._queue_copy(token, 0)
            step, model = self._step_call(), self.model
            cache, cache_arg = self.padded.cache, self.padded.cache_arg
            ran = 1
            for k in range(1, steps + 1):
                if k < steps:  # queue step k before waiting for step k-1's tokens
                    step(model, cache, cache_arg, token, position, full_mask, cpos)
                    self._queue_copy(token, k)
                    ran += 1
                tokens = self._wait(k - 1)
                if stamp is not None:
                    stamp(time.monotonic_ns(), tokens[:real])
                if self._all_ended(ended, tokens, k, caps, stops):
                    break
        return ran

    def _prefill(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The prompt, eager, at the batch's rows (the padded cache's first rows): its next
        tokens and each row's last position, as generate() numbers them (left padding)."""
        torch = self.torch
        position = mask.long().cumsum(-1) - 1
        position = position.masked_fill(mask == 0, 0)
        kwargs: dict[str, object] = {self.padded.cache_arg: self.padded.cache, "use_cache": True}
        if self._cache_position:
            kwargs["cache_position"] = torch.arange(ids.shape[1], device=ids.device)
        if self._keep:
            kwargs["logits_to_keep"] = 1
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=position, **kwargs
        ).logits
        return logits[:, -1].argmax(-1), position[:, -1]

    def _queue_copy(self, token: Tensor, k: int) -> None:
        """Step k's tokens on their way to the host (asynchronously on CUDA), its event after."""
        slot = k % RING
        event = self._events[slot]
        assert self._host is not None  # made with the buffers, before the first step
        self._host[slot].copy_(token, non_blocking=event is not None)
        if event is not None:  # on the stream that runs the step and the copy, by name
            event.record(self.torch.cuda.current_stream(token.device))

    def _wait(self, k: int) -> Tensor:
        """Step k's tokens on the host, once its step and copy are done."""
        slot = k % RING
        event = self._events[slot]
        if event is not None:
            event.synchronize()
        assert self._host is not None
        return self._host[slot]

    @staticmethod
    def _all_ended(
        ended: list[bool], tokens: Tensor, k: int, caps: list[int], stops: set[int]
    ) -> bool:
        """After step k-1 (k tokens a row): mark the rows that end there; True when all have."""
        values = tokens.tolist() if stops else None
        for i, cap in enumerate(caps):
            if not ended[i] and (k >= cap or (values is not None and values[i] in stops)):
                ended[i] = True
        return all(ended)
