"""``pad_decode``: the compiled decode step at one batch size, max_batch_size, for every batch.

torch.compile builds a graph per batch size, or one graph with a symbolic batch dimension whose
compile pays the symbolic shape work of every operation: a static graph compiles markedly
faster (docs/benchmarks.md). Padding the whole batch to max_batch_size rows (``batch_buckets:
[16]``) compiles once, static, but runs every prefill at max rows too, which costs TTFT. Here
only the decode step runs at max rows. The prefill, eager, runs at the
batch's own rows and fills the first rows of a static KV cache allocated for max rows
(``PaddedDecode.generate_kwargs``); each decode step's inputs are padded to max rows with
copies of the batch's first row, which read and write only their own rows of the cache, and its
logits are cut back to the batch's, so generate() sees its own batch throughout and returns
what it would unpadded. With packed grouped-query attention a decode step's cost barely grows
with its rows (bench/investigations/decode_kernels.py), so the padding costs a step little.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# Arguments of a decode step whose first dimension is not the batch (remote-code models only).
NOT_ROWS = frozenset({"cache_position"})


if TYPE_CHECKING:
    from torch import Tensor
    from transformers import CompileConfig, PreTrainedModel, StaticCache
    from transformers.cache_utils import StaticLayer
    from transformers.utils import ModelOutput

    class _RowsLayer(StaticLayer):
        rows: int  # the rows it is allocated for (``rows_layer``)


def _fillable_layers() -> tuple[type, ...]:
    """Cache layers a prefill can fill in part, through views of their first rows: attention
    layers whose every update writes their keys and values in place (linear-attention and
    indexed layers keep other state)."""
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    return StaticLayer, StaticSlidingWindowLayer


def layer_problem(model: PreTrainedModel) -> str | None:
    """Why a prefill cannot fill part of this model's static cache (None: it can)."""
    from transformers import StaticCache

    config = model.config.get_text_config(decoder=True)
    try:
        layers = StaticCache(config=config, max_cache_len=1).layers  # allocated lazily
    except Exception as exc:  # a config transformers' static cache does not take
        return f"transformers builds no static cache for it ({type(exc).__name__}: {exc})"
    odd = sorted({type(x).__name__ for x in layers if type(x) not in _fillable_layers()})
    return f"its static cache has {', '.join(odd)} layers" if odd else None


@functools.cache
def rows_layer(base: Any) -> type:
    """``base`` (a static cache layer) allocated for ``self.rows`` rows, of which an update may
    fill the first few: the prefill's, through views of those rows, which the layer's own
    in-place writes go through. A decode step's update, at all rows, is ``base``'s own (what
    torch.compile traces). One class per base, so compiled guards see the same type."""

    def update(
        self: _RowsLayer, key_states: Tensor, value_states: Tensor, *args: object, **kwargs: object
    ) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:  # every row, whatever the first update's batch
            self.lazy_initialization(
                _rows_like(key_states, self.rows), _rows_like(value_states, self.rows)
            )
        rows = key_states.shape[0]
        if rows == self.rows:
            return base.update(self, key_states, value_states, *args, **kwargs)
        if rows > self.rows:
            raise ValueError(f"{rows} rows for a cache of {self.rows}")
        full = self.keys, self.values
        assert full[0] is not None and full[1] is not None  # initialized above
        self.keys, self.values = full[0][:rows], full[1][:rows]
        try:
            return base.update(self, key_states, value_states, *args, **kwargs)
        finally:
            self.keys, self.values = full

    return type(f"Rows{base.__name__}", (base,), {"update": update})


def _rows_like(states: Tensor, rows: int) -> Tensor:
    """An empty tensor with ``states``' heads, head size, dtype and device and ``rows`` rows:
    what a layer's lazy initialization reads its allocation from."""
    return states.new_empty((rows, states.shape[1], 0, states.shape[-1]))


class PaddedDecode:
    """A model whose compiled decode steps run at ``rows`` rows, and the static KV cache each
    generate() is given (``generate_kwargs``), kept across calls so the compiled graph and its
    CUDA graph always see the same tensors."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.rows = 0
        self._cache: StaticCache | None = None
        self._length = 0
        # what the model calls its cache argument: ``cache`` from transformers 5.24 (which
        # still takes the old name, deprecated), ``past_key_values`` before
        forward = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        get_compiled_call = model.get_compiled_call  # transformers' auto-compile of decode steps

        def padded_call(compile_config: CompileConfig | None) -> Callable[..., ModelOutput]:
            return functools.partial(self._step, get_compiled_call(compile_config))

        # an instance attribute over the method
        model.get_compiled_call = padded_call  # type: ignore[method-assign]

    def generate_kwargs(self, rows: int, length: int) -> dict:
        """generate()'s cache arguments for a batch whose decode steps run at ``rows`` rows and
        whose prompt and output take ``length`` positions: this engine's cache, emptied, or a
        new one where the rows changed (a sweep's next point) or the length grew (a new graph,
        as transformers' own static cache would be: the warm-up sizes it for the run)."""
        if self._cache is None or rows != self.rows or length > self._length:
            self._cache = None  # the old cache's memory back before the new one takes its own
            self.rows, self._length = rows, max(length, self._length)
            self._cache = self._new_cache()
        else:
            import torch

            with torch.inference_mode():  # where generate() allocated its tensors
                self._cache.reset()
        return {self._cache_arg: self._cache, "cache_implementation": None}

    @property
    def cache(self) -> StaticCache | None:
        """The static cache the last ``generate_kwargs`` gave (None before the first)."""
        return self._cache

    @property
    def cache_arg(self) -> str:
        """What the model's forward calls its cache argument."""
        return self._cache_arg

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, length) of the cache the last ``generate_kwargs`` gave: given to another
        rank's ``generate_kwargs``, it makes that rank's cache the same."""
        return self.rows, self._length

    def _new_cache(self) -> StaticCache:
        from transformers import StaticCache

        config = self.model.config.get_text_config(decoder=True)
        cache = StaticCache(config=config, max_cache_len=self._length)
        layer: Any
        for layer in cache.layers:
            layer.__class__ = rows_layer(layer.__class__)
            layer.rows = self.rows
        return cache

    def _step(
        self, compiled: Callable[..., ModelOutput], *args: object, **kwargs: object
    ) -> ModelOutput:
        """One compiled decode step at ``rows`` rows, its logits the batch's (a generate() not
        given this cache is left as transformers runs it)."""
        first: Any = kwargs.get("input_ids")
        first = kwargs.get("inputs_embeds") if first is None else first
        batch = first.shape[0]
        if batch == self.rows or kwargs.get(self._cache_arg) is not self._cache:
            return compiled(*args, **kwargs)
        padded = {k: v if k in NOT_ROWS else _pad(v, batch, self.rows) for k, v in kwargs.items()}
        out = compiled(*args, **padded)
        out["logits"] = out["logits"][:batch]
        return out


def _pad(value: object, batch: int, rows: int) -> object:
    """``value`` with its first dimension, if it is the batch's, filled up to ``rows`` with
    copies of the first row (a dict of masks, each of them)."""
    import torch

    if isinstance(value, dict):
        return {k: _pad(v, batch, rows) for k, v in value.items()}
    if not torch.is_tensor(value) or not value.dim() or value.shape[0] != batch:
        return value
    return torch.cat([value, value[:1].expand(rows - batch, *value.shape[1:])])
