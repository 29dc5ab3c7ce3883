"""The engine's shapes under compile: prompt-width buckets, batch buckets with throw-away rows,
one graph for every batch size (or one static graph), the recompile limit, the warm-up's cache
size, inductor options and the compile cache counts."""

from __future__ import annotations

import pytest
import torch

from tests.engine_helpers import (
    Inline,
    compile_eagerly,
    input_shapes,
    make_engine,
)


@pytest.mark.integration
def test_prompt_widths_are_padded_up_to_the_bucket_and_every_token_is_still_stamped(
    tiny_model_dir,
):
    eng, out = make_engine(tiny_model_dir)
    widths = input_shapes(eng)
    eng.info["prompt_bucket"] = 16
    batch = [("req", 1, [5] * 5, 4, True, None), ("req", 2, [6] * 9, 4, True, None)]
    assert eng._generate(batch, set(), out, set()) == 0  # one stamp per token
    eng.info["prompt_bucket"] = 1
    assert eng._generate(batch, set(), out, set()) == 0
    assert widths == [(2, 16), (2, 9)]  # 9 up to 16; with no bucket, the longest prompt
    dones = [m for m in out.msgs if m[0] == "done"]
    assert sorted((m[2], m[3]) for m in dones) == [(1, 4), (1, 4), (2, 4), (2, 4)]


@pytest.mark.integration
def test_compiled_graphs_counts_what_torch_compile_builds():
    from loadtest.backends.transformers.compiling import compiled_graphs

    torch._dynamo.reset()
    before = compiled_graphs() or 0
    f = torch.compile(lambda x: x * 2, backend="eager")  # no C compiler needed
    f(torch.ones(3))
    f(torch.ones(3))  # same shape: no new graph
    f(torch.ones(5, 2))  # a new shape: a new graph (a recompile inside a window would count)
    assert compiled_graphs() - before == 2


def test_batch_buckets_are_powers_of_two_up_to_the_cap_or_the_sizes_given():
    from loadtest.backends.transformers.compiling import (
        batch_bucket,
        batch_buckets_of,
        bucket_sizes,
    )

    assert bucket_sizes(16) == [1, 2, 4, 8, 16] and bucket_sizes(12) == [1, 2, 4, 8, 12]
    assert bucket_sizes(16, smallest=2) == [2, 4, 8, 16] and bucket_sizes(1, smallest=2) == [1]
    assert [batch_bucket(n, [1, 2, 4, 8, 16]) for n in (1, 2, 3, 5, 8, 9, 16)] == [
        1, 2, 4, 8, 8, 16, 16,
    ]  # fmt: skip
    assert [batch_bucket(n, bucket_sizes(12)) for n in (9, 12)] == [12, 12]
    # sizes given: those under the cap, and the cap always
    assert bucket_sizes(16, [4, 1, 64]) == [1, 4, 16]
    assert [batch_bucket(n, [1, 4, 16]) for n in (1, 2, 4, 5, 16)] == [1, 4, 4, 16, 16]
    from loadtest.config.transformers_spec import TransformersSpec

    def buckets(**fields: object) -> list[int] | None:
        spec = {"mode": "static", "compile": True, "max_batch_size": 16, "batch_buckets": None}
        return batch_buckets_of(TransformersSpec.model_construct(model="m", **{**spec, **fields}))

    # on by default with compile, from 2: one dynamic-batch graph serves them all
    assert buckets() == [2, 4, 8, 16]
    assert buckets(batch_buckets=True) == [2, 4, 8, 16]
    assert buckets(max_batch_size=1) == [1]
    assert buckets(batch_buckets=[1, 4]) == [1, 4, 16]  # as given
    assert buckets(batch_buckets=False) is None
    assert buckets(compile=False) is None  # off by default in eager mode
    assert buckets(compile=False, batch_buckets=True) == [1, 2, 4, 8, 16]
    assert buckets(mode="continuous", batch_buckets=True) is None


@pytest.mark.integration
def test_a_bucketed_batch_runs_with_throw_away_rows_and_reports_only_the_real_ones(
    tiny_model_dir,
):
    eng, out = make_engine(tiny_model_dir)
    shapes = input_shapes(eng)
    eng.info["batch_buckets"] = [1, 2, 4, 8]
    fixed = [("req", i, [5] * (3 + i), 4, True, None) for i in (1, 2, 3)]
    assert eng._generate(fixed, set(), out, set()) == 0  # one stamp per token
    dones = sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
    assert shapes == [(4, 6)] and dones == [(1, 4), (2, 4), (3, 4)]  # 3 rows ran as 4
    assert all(rid > 0 for m in out.msgs if m[0] == "tokens" for rid in m[2])


@pytest.mark.integration
def test_a_batch_that_may_stop_at_eos_is_padded_with_copies_that_stop_with_it(tiny_model_dir):
    eng, out = make_engine(tiny_model_dir)
    outputs: list = []
    shapes = input_shapes(eng, outputs)
    first = [5, 6, 7]
    # the tiny model's greedy continuation of the first prompt; its second token is made the EOS
    eng._generate([("req", 1, first, 6, True, None)], set(), out, set())
    eos = outputs[-1][0, len(first) + 1].item()
    natural = [("req", 9, first, 6, False, eos), ("req", 10, [5], 6, False, eos)]
    runs = {}
    for buckets in (None, [1, 4, 8]):
        eng.info["batch_buckets"] = buckets
        out.msgs.clear()
        eng._generate(natural, set(), out, set())
        dones = sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
        runs[buckets is None] = (shapes[-1], outputs[-1].shape[1], dones)
    (unpadded, steps, dones), (padded, padded_steps, padded_dones) = runs[True], runs[False]
    assert unpadded == (2, 3) and padded == (4, 3)  # two copies of the first row
    assert padded_steps == steps  # the copies stopped with their row: no extra steps
    assert padded_dones == dones and dones[0] == (9, 2)  # the first row ended at its EOS
    assert outputs[-1][2:, 3:].tolist() == [outputs[-1][0, 3:].tolist()] * 2


@pytest.mark.integration
def test_a_compiled_warm_up_builds_one_graph_for_every_batch_size_from_two(tiny_model_dir):

    from loadtest.backends.transformers.compiling import compiled_graphs

    def graphs_built(warm) -> int:
        torch._dynamo.reset()
        before = compiled_graphs() or 0
        warm([(2, 8, 4), (4, 8, 4), (8, 8, 4)])
        return compiled_graphs() - before

    eng, out = make_engine(tiny_model_dir, compile=True, pad_decode=False)
    compile_eagerly(eng.model)
    assert graphs_built(eng.warmup.shapes) == 2  # unmarked: static at 2, dynamic batch at 4
    assert graphs_built(eng.warmup.run) == 1  # marked: dynamic from the first compile
    kind, warmup_s, details = out.msgs[-1]  # the warm-up's compile and gc shares, of its time
    assert kind == "warmed" and 0 < details["compile_s"] <= warmup_s
    assert 0 <= details["gc_s"] <= warmup_s
    outputs: list = []
    input_shapes(eng, outputs)
    batch = [("req", i, [5] * (2 + i), 4, True, None) for i in (1, 2, 3)]
    graphs = compiled_graphs()
    eng._generate(batch, set(), out, set())  # 3 rows run as 4, no marks: the same graph
    assert compiled_graphs() == graphs and outputs[-1].shape[0] == 4
    compiled_tokens = outputs[-1][:3]
    eager, _ = make_engine(tiny_model_dir)
    input_shapes(eager, outputs)
    eager._generate(batch, set(), Inline(), set())
    assert torch.equal(compiled_tokens, outputs[-1])  # what it computes is eager's


def test_the_warm_up_marks_the_batch_dynamic_unless_the_sizes_listed_leave_one():
    from loadtest.backends.transformers.compiling import batch_buckets_of, marks_batch_dynamic
    from loadtest.config.transformers_spec import TransformersSpec

    def marks(**fields: object) -> bool:
        fields = {"mode": "static", "compile": True, "max_batch_size": 16, **fields}
        spec = TransformersSpec.model_construct(model="m", **fields)
        return marks_batch_dynamic(spec, batch_buckets_of(spec))

    # one graph for every size from 2; in a sweep the default buckets of a point of 2 are [2],
    # and the points after it reuse its graph
    assert marks() and marks(batch_buckets=True) and marks(max_batch_size=2)
    assert marks(batch_buckets=False) and marks(batch_buckets=[4])  # 4 and 16: two sizes
    assert not marks(batch_buckets=[16])  # one size listed: one static graph
    assert not marks(batch_buckets=[1, 16])  # size 1 is a static graph of its own anyway
    assert not marks(batch_buckets=[16], max_batch_size=8)  # the cap, 8, is the one size
    assert marks(batch_buckets=[16], max_batch_size=32)  # 16 and 32


@pytest.mark.integration
def test_a_compiled_warm_up_of_one_batch_size_builds_one_static_graph(tiny_model_dir):

    from loadtest.backends.transformers.compiling import compiled_graphs

    eng, out = make_engine(
        tiny_model_dir, compile=True, pad_decode=False, batch_buckets=[4], max_batch_size=4
    )
    assert eng.info["batch_buckets"] == [4]
    compile_eagerly(eng.model)
    torch._dynamo.reset()
    before = compiled_graphs() or 0
    eng.warmup.run([(4, 8, 4)])
    assert compiled_graphs() - before == 1
    eng._generate([("req", 1, [5] * 8, 4, True, None)] * 3, set(), out, set())  # runs as 4
    assert compiled_graphs() - before == 1
    # static: another size is another graph (a graph marked dynamic would have served it)
    eng.info["batch_buckets"] = None
    eng._generate([("req", 2, [5] * 8, 4, True, None)] * 3, set(), out, set())
    assert compiled_graphs() - before == 2


@pytest.mark.integration
def test_a_compiled_step_past_torchs_recompile_limit_fails_instead_of_running_eagerly(
    tiny_model_dir,
):
    import transformers
    from torch._dynamo.exc import FailOnRecompileLimitHit

    from loadtest.backends.transformers.compiling import RECOMPILE_LIMIT

    # loading sets torch's limits; unpadded decode steps, so two batch sizes are two graphs
    eng, out = make_engine(tiny_model_dir, compile=True, pad_decode=False)
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT
    # the engine's settings but static graphs and the eager backend, with not full graphs (as
    # transformers' default), where torch would fall back to eager at the limit
    config = transformers.CompileConfig(backend="eager", mode=None, dynamic=False)
    config._compile_all_devices = True
    eng.model.generation_config.compile_config = config
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        eng._generate([("req", 1, [5] * 8, 4, True, None)] * 2, set(), out, set())
        with pytest.raises(FailOnRecompileLimitHit):  # a second size: a second graph
            eng._generate([("req", 2, [5] * 8, 4, True, None)] * 3, set(), out, set())


def _spy_on_decodes(eng) -> list[tuple[int, int]]:
    """(new tokens asked for, tokens decoded) of every batch the engine decodes from now on,
    through generate() or the pipelined loop."""
    calls: list = []
    if eng.loop is not None:
        run = eng.loop.run

        def spy_run(ids, mask, caps, eos, steps, stamp=None):
            ran = run(ids, mask, caps, eos, steps, stamp)
            calls.append((max(caps), ran))
            return ran

        eng.loop.run = spy_run
        return calls
    generate = eng.model.generate

    def spy(**kwargs):
        sequences = generate(**kwargs)
        calls.append((kwargs["max_new_tokens"], sequences.shape[1] - kwargs["input_ids"].shape[1]))
        return sequences

    eng.model.generate = spy
    return calls


@pytest.mark.integration
@pytest.mark.parametrize("loop", ["generate", "pipelined"])
def test_a_compiled_warm_up_sizes_the_cache_for_the_whole_output_and_runs_a_few_steps(
    tiny_model_dir, loop
):

    from loadtest.backends.transformers.compiling import compiled_graphs
    from loadtest.backends.transformers.decode_loop import PIPELINED
    from loadtest.backends.transformers.stamping import AFTER_SYNC
    from loadtest.backends.transformers.warmup import WARM_STEPS

    eng, out = make_engine(tiny_model_dir, compile=True, decode_loop=loop)
    assert eng.info["decode_loop"] == ("pipelined" if loop == "pipelined" else "generate()")
    compile_eagerly(eng.model)
    calls = _spy_on_decodes(eng)
    new_tokens = WARM_STEPS + 12
    torch._dynamo.reset()
    eng.warmup.run([(2, 8, new_tokens), (4, 8, new_tokens)])
    # a static cache for 8 + 20 tokens, generated to 8 of them, one stamp per token still
    assert calls == [(new_tokens, WARM_STEPS)] * 2
    assert eng.padded.shape == (8, 8 + new_tokens)
    assert eng.stamp_source == (PIPELINED if loop == "pipelined" else AFTER_SYNC)
    graphs = compiled_graphs()
    batch = [("req", i, [5] * 8, new_tokens, True, None) for i in (1, 2, 3)]
    out.msgs.clear()
    eng._generate(batch, set(), out, set())  # the run's longest output: the graph warmed
    assert compiled_graphs() == graphs and calls[-1] == (new_tokens, new_tokens)
    assert sorted((m[2], m[3]) for m in out.msgs if m[0] == "done") == [
        (i, new_tokens) for i in (1, 2, 3)
    ]
    # a longer cache is another graph: what sizing it for the run's longest output avoids
    eng._generate([("req", 9, [5] * 8, new_tokens + 8, True, None)] * 2, set(), out, set())
    assert compiled_graphs() > graphs


def test_the_decode_step_compiles_with_the_fast_passes_by_default_or_the_options_given():
    from loadtest.backends.transformers.compiling import FAST_COMPILE, decode_compile_config

    config, options = decode_compile_config(None)
    assert options == {**FAST_COMPILE, "triton.cudagraphs": True}
    assert options["pattern_matcher"] is False and len(options) == 4
    # torch.compile takes a mode or options: reduce-overhead's one setting moves to options
    assert config.mode is None and config.options == options
    assert decode_compile_config({})[1] == {"triton.cudagraphs": True}  # torch's own passes
    assert decode_compile_config({"triton.cudagraphs": False, "max_autotune": True})[1] == {
        "triton.cudagraphs": False,
        "max_autotune": True,
    }
    with pytest.raises(ValueError, match=r"backend.compile_options: 'nope', 'pattern' are not"):
        decode_compile_config({"pattern": False, "nope": 1})


@pytest.mark.integration
def test_a_compiled_engine_hands_its_inductor_options_to_torch_compile(tiny_model_dir, monkeypatch):
    eng, out = make_engine(tiny_model_dir, compile=True, compile_options={"max_autotune": True})
    assert eng.info["compile_options"] == {"max_autotune": True, "triton.cudagraphs": True}
    assert make_engine(tiny_model_dir)[0].info["compile_options"] is None  # eager: nothing compiled
    calls: list = []

    def recorded_compile(fn, **kwargs):
        calls.append(kwargs)
        return fn  # eager underneath: what matters is what torch.compile was asked for

    monkeypatch.setattr(torch, "compile", recorded_compile)
    eng.model.generation_config.compile_config._compile_all_devices = True  # CUDA only otherwise
    eng._generate([("req", 1, [5, 6, 7], 4, True, None)], set(), out, set())
    assert [(c["mode"], c["options"]) for c in calls] == [
        (None, {"max_autotune": True, "triton.cudagraphs": True})
    ]


def test_the_compile_cache_counts_come_from_inductors_counters():
    from torch._dynamo.utils import counters

    from loadtest.backends.transformers.compiling import compile_cache_counts

    saved = dict(counters["inductor"])
    try:
        counters["inductor"].clear()
        assert compile_cache_counts() is None  # nothing compiled by inductor
        counters["inductor"]["fxgraph_cache_hit"] += 4
        counters["inductor"]["fxgraph_cache_miss"] += 1
        assert compile_cache_counts() == {"hits": 4, "misses": 1}
    finally:
        counters["inductor"].clear()
        counters["inductor"].update(saved)
