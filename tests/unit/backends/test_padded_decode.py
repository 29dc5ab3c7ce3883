"""pad_decode: every compiled decode step at max_batch_size rows, the prefill at the batch's."""

from __future__ import annotations

import pytest
import torch

from loadtest.backends.transformers.padded_decode import rows_layer
from tests.conftest import refused_backend_output
from tests.engine_helpers import Inline, compile_eagerly, input_shapes, make_engine


def test_decode_steps_are_padded_by_default_in_static_mode_with_compile_only():
    from loadtest.backends.transformers.compiling import batching_details, pads_decode
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec.model_construct(
        model="m", mode="static", compile=True, max_batch_size=16, batch_buckets=None
    )
    assert pads_decode(spec) and pads_decode(spec.model_copy(update={"pad_decode": True}))
    assert not pads_decode(spec.model_copy(update={"pad_decode": False}))
    assert not pads_decode(spec.model_copy(update={"compile": False}))
    assert not pads_decode(spec.model_copy(update={"mode": "continuous"})) and not pads_decode(
        spec.model_copy(update={"mode": "single"})
    )
    # padded, a batch of one prefills as one; unpadded, the dynamic graph starts at 2
    assert batching_details(spec, True) == {
        "batch_buckets": [1, 2, 4, 8, 16],
        "decode_batch_size": 16,
    }
    assert batching_details(spec, False) == {
        "batch_buckets": [2, 4, 8, 16],
        "decode_batch_size": None,
    }
    # a sweep's next point: the rows follow its max_batch_size
    assert batching_details(spec.model_copy(update={"max_batch_size": 4}), True) == {
        "batch_buckets": [1, 2, 4],
        "decode_batch_size": 4,
    }
    assert batching_details(spec.model_copy(update={"batch_buckets": [16]}), True)[
        "batch_buckets"
    ] == [16]


def _cache_rows(layer) -> list[list[float]]:
    return layer.keys[:, 0, :, 0].tolist()


def test_a_rows_layer_lets_a_prefill_fill_its_first_rows_and_a_decode_step_every_row():
    from transformers.cache_utils import StaticLayer

    layer = StaticLayer(max_cache_len=4)
    layer.__class__ = rows_layer(StaticLayer)
    layer.rows = 3
    # the prefill: 2 rows of 2 positions (one head of size 1), keys 1..4 and values their negatives
    k = torch.arange(1.0, 5.0).reshape(2, 1, 2, 1)
    keys, values = layer.update(k, -k)
    assert keys.shape == values.shape == (2, 1, 4, 1)  # what its attention reads: its rows
    assert layer.keys.shape == (3, 1, 4, 1)  # every row allocated, whatever the first update's
    assert _cache_rows(layer) == [[1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 0, 0]]
    assert layer.values[:, 0, :, 0].tolist() == [[-1, -2, 0, 0], [-3, -4, 0, 0], [0, 0, 0, 0]]
    # a decode step at every row writes position 2 of each
    step = torch.tensor([10.0, 20.0, 30.0]).reshape(3, 1, 1, 1)
    keys, _ = layer.update(step, -step)
    assert keys.shape == (3, 1, 4, 1)
    assert _cache_rows(layer) == [[1, 2, 10, 0], [3, 4, 20, 0], [0, 0, 30, 0]]
    with pytest.raises(ValueError, match="4 rows for a cache of 3"):
        layer.update(torch.zeros(4, 1, 1, 1), torch.zeros(4, 1, 1, 1))
    assert isinstance(layer, StaticLayer) and rows_layer(StaticLayer) is type(layer)  # one class


def test_a_sliding_rows_layer_keeps_each_rows_last_window_of_positions():
    from transformers.cache_utils import StaticSlidingWindowLayer

    layer = StaticSlidingWindowLayer(max_cache_len=8, sliding_window=3)
    layer.__class__ = rows_layer(StaticSlidingWindowLayer)
    layer.rows = 3
    # a prefill of 4 positions in 2 rows, longer than the window: each row keeps its last 3
    k = torch.arange(1.0, 9.0).reshape(2, 1, 4, 1)
    keys, _ = layer.update(k, -k)
    assert keys.shape == (2, 1, 4, 1)  # the whole prompt, for the prefill's own attention
    assert _cache_rows(layer) == [[2, 3, 4], [6, 7, 8], [0, 0, 0]]
    # the window full, a decode step at every row rolls it on by one
    step = torch.tensor([10.0, 20.0, 30.0]).reshape(3, 1, 1, 1)
    layer.update(step, -step)
    assert _cache_rows(layer) == [[3, 4, 10], [7, 8, 20], [0, 0, 30]]


def _spy_on_compiled_steps(monkeypatch) -> list[int]:
    """The rows of every compiled decode step any tiny Llama takes from now on."""
    import transformers

    rows: list[int] = []
    original = transformers.LlamaForCausalLM.get_compiled_call

    def spy(self, compile_config):
        compiled = original(self, compile_config)

        def call(*args, **kwargs):
            rows.append(kwargs["input_ids"].shape[0])
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(transformers.LlamaForCausalLM, "get_compiled_call", spy)
    return rows


@pytest.mark.integration
def test_padded_decode_steps_run_at_max_rows_through_one_graph_and_give_the_batchs_tokens(
    tiny_model_dir, monkeypatch
):
    from loadtest.backends.transformers.compiling import compiled_graphs

    step_rows = _spy_on_compiled_steps(monkeypatch)
    # pad_decode: on by default; generate()'s own loop (test_decode_loop.py: the pipelined one)
    eng, out = make_engine(tiny_model_dir, compile=True, decode_loop="generate")
    assert eng.info["pad_decode"] and eng.info["decode_batch_size"] == 8
    assert eng.info["batch_buckets"] == [1, 2, 4, 8]
    compile_eagerly(eng.model)
    torch._dynamo.reset()
    before = compiled_graphs() or 0
    eng.warmup.run([(1, 8, 4), (2, 8, 4), (4, 8, 4), (8, 8, 4)])
    assert compiled_graphs() - before == 1  # one static graph for every batch size
    assert step_rows == [8] * 12  # 4 tokens: the prefill's and 3 decode steps, each at 8 rows
    cache = eng.padded._cache
    assert cache.layers[0].keys.shape[0] == 8

    outputs: list = []
    prefill_shapes = input_shapes(eng, outputs)
    batch = [("req", i, [5] * (2 + i), 4, True, None) for i in (1, 2, 3)]
    step_rows.clear()
    out.msgs.clear()
    assert eng._generate(batch, set(), out, set()) == 0  # one stamp per token
    assert compiled_graphs() - before == 1 and step_rows == [8] * 3
    assert prefill_shapes == [(4, 5)]  # the prefill at the batch's bucket, 4 rows, not 8
    assert eng.padded._cache is cache  # the same tensors for the compiled graph
    dones = sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
    assert dones == [(1, 4), (2, 4), (3, 4)]
    padded_tokens = outputs[-1][:3]
    eager, _ = make_engine(tiny_model_dir)
    input_shapes(eager, outputs)
    eager._generate(batch, set(), Inline(), set())
    assert torch.equal(padded_tokens, outputs[-1])  # what it computes is the unpadded eager's

    # a sweep's next point (a live max_batch_size): its steps at its rows, in a cache of its own
    eng.handle_control(("configure", 4, 0.0))  # max_batch_size 4, max_wait_ms 0
    assert eng.info["decode_batch_size"] == 4 and eng.info["batch_buckets"] == [1, 2, 4]
    step_rows.clear()
    eng._generate(batch[:1], set(), out, set())
    assert step_rows == [4] * 3 and eng.padded._cache.layers[0].keys.shape[0] == 4
    # a generate() not given the engine's cache (a user's own loop on the model) runs unpadded
    ids = torch.full((3, 5), 5)
    with torch.inference_mode():
        seq = eng.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=3,
            do_sample=False,
            cache_implementation="static",
        )
    assert seq.shape == (3, 8) and step_rows[-2:] == [3, 3]


def _no_static_cache(*args, **kwargs):
    raise ValueError("no layer types")


@pytest.mark.integration
@pytest.mark.parametrize("why", ["linear-attention layers", "no static cache"])
def test_a_cache_a_prefill_cannot_fill_in_part_decodes_unpadded_or_fails_naming_the_field(
    tiny_model_dir, monkeypatch, why
):
    import transformers

    from loadtest.backends.transformers import padded_decode

    if why == "linear-attention layers":  # layers that keep state besides keys and values
        monkeypatch.setattr(padded_decode, "_fillable_layers", lambda: ())
        said = "its static cache has StaticLayer layers"
    else:  # a config transformers' static cache does not take
        monkeypatch.setattr(transformers, "StaticCache", _no_static_cache)
        said = "transformers builds no static cache for it (ValueError: no layer types)"
    eng, _ = make_engine(tiny_model_dir, compile=True)
    assert eng.padded is None and eng.info["pad_decode"] is False
    assert eng.info["pad_decode_off"] == said
    assert eng.info["batch_buckets"] == [2, 4, 8] and eng.info["decode_batch_size"] is None
    with pytest.raises(ValueError, match=r"backend\.pad_decode: .* cannot pad its decode steps"):
        make_engine(tiny_model_dir, compile=True, pad_decode=True)


@pytest.mark.parametrize(
    "backend",
    [{"pad_decode": True}, {"pad_decode": True, "compile": True, "mode": "continuous"}],
)
def test_padded_decode_asked_for_without_compiled_static_batches_is_refused_by_field(
    tmp_path, backend
):
    output = refused_backend_output(tmp_path, backend)
    assert "backend.pad_decode" in output, output
    assert "needs compile: true and mode: static" in output
