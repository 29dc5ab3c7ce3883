"""The pipelined decode loop: generate()'s greedy tokens, one stamp a token, one graph for every
batch size, a step nobody reads only when rows stop at end-of-sequence, and generate() where
the loop cannot give its tokens."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import refused_backend_output
from tests.engine_helpers import Inline, compile_eagerly, input_shapes, make_engine

pytestmark = pytest.mark.integration

# Three rows of different prompt lengths (left padding), each with its own cap.
BATCH = [("req", i, [5 + i] * (2 + i) + [7, 9], 3 + 2 * i, True, None) for i in (1, 2, 3)]


def _reference(tiny_model_dir, batch) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """generate()'s tokens for each row of ``batch`` (to the longest cap) and the engine's
    (rid, tokens) done messages, through the engine's generate() path."""
    eng, out = make_engine(tiny_model_dir, compile=True, decode_loop="generate")
    outputs: list = []
    input_shapes(eng, outputs)
    width = max(len(r[2]) for r in batch)
    eng._generate(batch, set(), out, set())
    rows = outputs[-1][: len(batch), width:].tolist()
    return rows, sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")


def _pipelined(tiny_model_dir, compiled: bool, **spec):
    """An engine decoding pipelined, its outbox, and the tokens each step handed over."""
    eng, out = make_engine(tiny_model_dir, compile=True, **spec)
    assert eng.info["decode_loop"] == "pipelined" and "decode_loop_off" not in eng.info
    if compiled:
        compile_eagerly(eng.model)  # torch.compile's eager backend: traced as on a GPU
    steps: list = []
    run = eng.loop.run

    def spy(ids, mask, caps, eos, n, stamp=None):
        def seen(t, tokens):
            steps.append((t, tokens.tolist()))
            stamp(t, tokens)

        return run(ids, mask, caps, eos, n, seen)

    eng.loop.run = spy
    return eng, out, steps


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_pipelined_loop_gives_generates_tokens_with_one_stamp_a_token(tiny_model_dir, compiled):
    want, dones = _reference(tiny_model_dir, BATCH)
    eng, out, steps = _pipelined(tiny_model_dir, compiled)
    assert eng._generate(BATCH, set(), out, set()) == 0
    # caps 5, 7, 9: nine steps (the prefill's and eight decode steps), every row's token in each
    assert len(steps) == 9
    assert [[s[1][i] for s in steps] for i in range(3)] == want
    assert (
        sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
        == dones
        == [
            (1, 5),
            (2, 7),
            (3, 9),
        ]
    )
    stamps = [t for m in out.msgs if m[0] == "tokens" for t in m[1]]
    assert stamps == sorted(stamps) and stamps == [s[0] for s in steps]  # a stamp a step, in order
    tokens = {rid: 0 for rid in (1, 2, 3)}
    for m in out.msgs:
        if m[0] == "tokens":
            for rid in m[2]:
                tokens[rid] += len(m[1])
    assert tokens == {1: 5, 2: 7, 3: 9}  # one stamped token a row a step, to its cap


def test_rows_stopping_at_end_of_sequence_stop_where_generate_stops_them(tiny_model_dir):
    want, _ = _reference(tiny_model_dir, BATCH)
    eos = want[0][2]  # row 1's third token: row 1 ends there, the others at it or at their caps
    batch = [(*r[:4], False, eos) for r in BATCH]
    _, dones = _reference(tiny_model_dir, batch)
    eng, out, steps = _pipelined(tiny_model_dir, compiled=False)
    eng._generate(batch, set(), out, set())
    assert sorted((m[2], m[3]) for m in out.msgs if m[0] == "done") == dones
    assert dones[0] == (1, 3)


def test_the_host_learns_of_an_end_of_sequence_a_step_late_and_runs_one_step_more(tiny_model_dir):
    eng, _, _ = _pipelined(tiny_model_dir, compiled=False)
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)
    eng.padded.generate_kwargs(8, 3 + 8)
    seen: list = []
    ran = eng.loop.run(ids, mask, [8], None, 8, lambda t, tok: seen.append(tok.tolist()))
    assert ran == 8 and len(seen) == 8  # rows stopping at their length stop on time
    third = seen[2][0]
    first_at = [s[0] for s in seen].index(third)  # the first step to give that token
    eng.padded.generate_kwargs(8, 3 + 8)
    seen.clear()
    ran = eng.loop.run(ids, mask, [8], [third], 8, lambda t, tok: seen.append(tok.tolist()))
    # stamped up to the end-of-sequence token; the step queued before it was read ran unread
    assert len(seen) == first_at + 1 and ran == first_at + 2


def test_one_compiled_graph_serves_every_batch_size(tiny_model_dir):
    from loadtest.backends.transformers.compiling import compiled_graphs
    from loadtest.backends.transformers.warmup import WARM_STEPS

    eng, out, steps = _pipelined(tiny_model_dir, compiled=True)
    torch._dynamo.reset()
    before = compiled_graphs() or 0
    eng.warmup.run([(1, 8, 9), (2, 8, 9), (4, 8, 9), (8, 8, 9)])
    assert compiled_graphs() - before == 1
    assert eng.padded.shape == (8, 17)  # the run's widest prompt and longest output
    eng._generate(BATCH, set(), out, set())  # 3 rows in a bucket of 4, decoded at 8
    assert compiled_graphs() - before == 1 and len(steps) == 4 * WARM_STEPS + 9


def test_a_model_whose_generation_config_processes_logits_decodes_through_generate(
    tiny_model_dir, monkeypatch
):
    import transformers

    from loadtest.backends.transformers.decode_loop import decode_loop_of

    eng, _ = make_engine(tiny_model_dir, compile=True)
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(model="tiny", decode_loop=None)
    assert decode_loop_of(eng.model, spec, True) == ("pipelined", None)
    assert decode_loop_of(eng.model, spec, False) == (
        "generate()",
        "its decode steps are not padded (pad_decode)",
    )
    assert decode_loop_of(eng.model, spec.model_copy(update={"decode_loop": "generate"}), True) == (
        "generate()",
        "the scenario's decode_loop: generate",
    )
    eng.model.generation_config.repetition_penalty = 1.2
    eng.model.generation_config.suppress_tokens = [3]
    why = "its generation config asks for logits processing (repetition_penalty, suppress_tokens)"
    assert decode_loop_of(eng.model, spec, True) == ("generate()", why)
    with pytest.raises(ValueError, match=r"backend\.decode_loop: tiny cannot decode pipelined"):
        decode_loop_of(eng.model, spec.model_copy(update={"decode_loop": "pipelined"}), True)
    eng.model.generation_config.repetition_penalty = 1.0
    eng.model.generation_config.suppress_tokens = None
    monkeypatch.setattr(transformers, "__version__", "4.56.0")
    assert decode_loop_of(eng.model, spec, True)[1] == (
        "transformers 4.56.0 (the pipelined loop needs 5 or later)"
    )


@pytest.mark.parametrize(
    "backend",
    [
        {"decode_loop": "pipelined"},
        {"decode_loop": "pipelined", "compile": True, "pad_decode": False},
    ],
)
def test_a_pipelined_loop_asked_for_without_padded_compiled_steps_is_refused_by_field(
    tmp_path, backend
):
    output = refused_backend_output(tmp_path, backend)
    assert "backend.decode_loop" in output, output
    assert "needs compile: true, mode: static and pad_decode not false" in output


def test_an_engine_without_padded_steps_keeps_generate(tiny_model_dir):
    eng, out = make_engine(tiny_model_dir)  # eager
    assert eng.loop is None and eng.info["decode_loop"] == "generate()"
    assert eng.info["decode_loop_off"] == "its decode steps are not padded (pad_decode)"
    eng._generate(BATCH, set(), Inline(), set())
