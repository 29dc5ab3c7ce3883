"""Every plan style the split applies gives the whole model's logits (two ranks, gloo, CPU).

transformers' plans differ by architecture and by version (5.17 adds ``embed_tokens:
embedding_rowwise`` to a tied model's plan, 5.24 does not; Qwen3 has replicated norms; Qwen2
biased projections), so each is built here as a real checkpoint and split through the engine's
own loading path. One pair of rank processes loads them all, one after the other, in one group.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
import traceback

import pytest

pytest.importorskip("transformers")

IDS = [[5, 6, 7, 8, 9, 10, 11, 300, 2]]  # 300: in the second rank's rows of the vocabulary


def _checkpoints(root) -> dict:
    """name -> (folder, plan extra): small real checkpoints, one per plan style."""
    import torch
    import transformers

    shapes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    models = {
        # an odd vocabulary: the last rank's rows end in padding
        "llama-untied-odd-vocab": (transformers.LlamaConfig(vocab_size=331, **shapes), None),
        # what transformers 5.17 plans for a tied model: a vocabulary-parallel embedding
        "llama-tied-embedding-rowwise": (
            transformers.LlamaConfig(vocab_size=330, tie_word_embeddings=True, **shapes),
            {"embed_tokens": "embedding_rowwise"},
        ),
        "mistral": (transformers.MistralConfig(vocab_size=330, **shapes), None),
        # biased q/k/v projections, split with their weights
        "qwen2-tied": (
            transformers.Qwen2Config(vocab_size=330, tie_word_embeddings=True, **shapes),
            None,
        ),
        # q_norm and k_norm: replicated_with_grad_allreduce
        "qwen3": (transformers.Qwen3Config(vocab_size=330, head_dim=8, **shapes), None),
    }
    out = {}
    for name, (config, extra) in models.items():
        torch.manual_seed(1)
        folder = root / name
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        for p in model.parameters():  # no zero biases or unit norms: every slice must count
            p.data.normal_(0, 0.2)
        model.save_pretrained(folder)
        out[name] = (str(folder), extra)
    return out


def _rank(rank: int, port: int, checkpoints: dict, out) -> None:
    try:
        import torch

        from loadtest.backends.transformers import loading, parallel, split
        from loadtest.backends.transformers.layout import Layout

        layout = Layout(rank, 2, ("cpu", "cpu"), port, 2)
        parallel.join_group(layout, torch.device("cpu"))
        ids = torch.tensor(IDS)
        for name, (folder, extra) in checkpoints.items():
            config = split.checkpoint_config(loading.Path(folder))
            if extra:
                config.base_model_tp_plan = {**config.base_model_tp_plan, **extra}
            plan = split.plan_of(config)
            model, facts = loading._load_split(
                config, loading.Path(folder), plan, torch.device("cpu"), torch.float32, {}, layout
            )
            with torch.inference_mode():
                logits = model(ids).logits
            # the collectives trace into one graph: compiled, the split step has no break
            compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
            with torch.inference_mode():
                traced = compiled(ids).logits
            out.put((rank, name, logits.tolist(), traced.tolist(), facts))
    except BaseException:
        out.put((rank, "error", traceback.format_exc(), None, None))


@pytest.fixture(scope="module")
def split_results(tmp_path_factory):
    checkpoints = _checkpoints(tmp_path_factory.mktemp("tp-plans"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, checkpoints, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got: dict = {}
    deadline = time.monotonic() + 240
    try:
        while len(got) < 2 * len(checkpoints):
            rank, name, logits, traced, facts = out.get(timeout=max(1, deadline - time.monotonic()))
            assert name != "error", f"rank {rank}:\n{logits}"
            got[rank, name] = (logits, traced, facts)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return checkpoints, got


@pytest.mark.parametrize(
    "name",
    ["llama-untied-odd-vocab", "llama-tied-embedding-rowwise", "mistral", "qwen2-tied", "qwen3"],
)
def test_each_plan_style_split_over_two_ranks_gives_the_whole_models_logits(split_results, name):
    import torch
    import transformers

    from loadtest.backends.transformers import split

    checkpoints, got = split_results
    whole = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoints[name][0], dtype=torch.float32
    )
    with torch.inference_mode():
        want = whole(torch.tensor(IDS)).logits
    for rank in (0, 1):
        logits, traced, facts = got[rank, name]
        assert torch.allclose(torch.tensor(logits), want, atol=1e-5), name
        assert torch.allclose(torch.tensor(traced), want, atol=1e-5), name
        # the vocabulary is split in every one (each model's lm_head plan is colwise)
        rows = -(-whole.config.vocab_size // 2)
        assert facts["vocabulary_rows"] == rows
        assert facts["per_rank"] == {
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 32,
        }
    # the styles applied are this transformers version's own plan for the model (4.56's Qwen3
    # has no replicated norms, 5.x's has; 5.17 plans a tied embedding embedding_rowwise)
    plan = split.plan_of(whole.config)
    if name == "llama-tied-embedding-rowwise":
        plan["embed_tokens"] = "embedding_rowwise"
    assert got[0, name][2]["plan_styles"] == sorted(set(plan.values()))


def test_a_plan_style_the_split_cannot_apply_is_refused_naming_the_layer_and_style(tmp_path):
    import transformers

    from loadtest.backends.transformers import split

    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4)
    config.base_model_tp_plan = {
        **config.base_model_tp_plan,
        "layers.*.mlp.up_proj": "packed_colwise",
    }
    with pytest.raises(ValueError, match=r"layer 'layers\.\*\.mlp\.up_proj' is 'packed_colwise'"):
        split.plan_of(config)


def test_a_refused_plan_fails_the_rank_before_any_rendezvous(tmp_path):
    # a rank alone in a group of two would wait for its peer at the rendezvous: the refusal
    # must come first, at once
    import transformers

    from loadtest.backends.transformers.layout import Layout
    from loadtest.backends.transformers.loading import load_model

    # Phi-3's fused qkv_proj has a style this split does not apply in every transformers the
    # project allows (4.56: colwise_rep; 5.25: colwise_gather_output). Mixtral's was, until 5.25
    # dropped its experts from the plan: its attention alone now splits, and the rank waited.
    config = transformers.Phi3Config(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=1, vocab_size=64, pad_token_id=0,
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(device="cpu", dtype="float32", seed=0, model=str(tmp_path))
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"phi3: tensor_parallel cannot apply this model's plan"):
        load_model(spec, "/", Layout(0, 2, ("cpu", "cpu"), 1, 2))
    assert time.monotonic() - started < 30
