"""The packed grouped-query attention of a decode step: the same attention as transformers' SDPA
(which repeats the keys and values per query head), and when the engine chooses it."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from loadtest.backends.transformers.attention import (  # noqa: E402
    PACKED_SDPA,
    pack_decode_attention,
    packed_gqa_sdpa,
)


class Module:  # what an attention function reads from its module
    num_key_value_groups = 3
    is_causal = True
    training = False


def _reference(query, key, value, mask):
    """Attention with every query head given its own copy of its key/value head."""
    groups = query.shape[1] // key.shape[1]
    key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    scores = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ value).transpose(1, 2)  # [B, Q, H, D]


def test_a_decode_step_packed_onto_the_key_value_heads_is_the_same_attention():
    torch.manual_seed(0)
    q = torch.randn(2, 6, 1, 8)  # 6 query heads on 2 key/value heads: groups of 3
    k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    # row 0 is left-padded by two; row 1 has an unfilled cache slot at the end
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]], dtype=torch.bool)[:, None, None, :]
    out, weights = packed_gqa_sdpa(Module(), q, k, v, mask)
    assert out.shape == (2, 1, 6, 8) and weights is None
    torch.testing.assert_close(out, _reference(q, k, v, mask), atol=1e-6, rtol=1e-5)
    # query head 4 reads key/value head 1 (4 // 3): change that head's keys, and only the
    # heads of its group, 3..5, change
    k2 = k.clone()
    k2[:, 1] += 1.0
    moved = (packed_gqa_sdpa(Module(), q, k2, v, mask)[0] - out).abs().amax(dim=(0, 1, 3))
    assert (moved[:3] == 0).all() and (moved[3:] > 0).all()


@pytest.mark.parametrize(
    "change",
    [
        {"q_len": 3},  # a prefill: transformers' own, causal
        {"mask": None},  # no mask: SDPA's grouped heads, as transformers does
        {"per_head_mask": True},  # a mask per head does not broadcast over a group
    ],
)
def test_every_other_call_is_transformers_own_sdpa(change):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(1)
    q_len = change.get("q_len", 1)
    q = torch.randn(2, 6, q_len, 8)
    k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.ones(2, 6 if change.get("per_head_mask") else 1, q_len, 5, dtype=torch.bool)
    mask[..., 0] = False
    mask = change.get("mask", mask)
    ours = packed_gqa_sdpa(Module(), q, k, v, mask)[0]
    theirs = sdpa_attention_forward(Module(), q, k, v, mask)[0]
    assert torch.equal(ours, theirs)


def _load(model_dir, attn=None):
    from loadtest.backends.transformers.loading import load_model
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(
        model=str(model_dir),
        device="cpu",
        dtype="float32",
        seed=0,
        attn_implementation=attn,
        trust_remote_code=False,
        mode="static",
        compile=False,
        max_batch_size=4,
    )
    return load_model(spec, ".")


@pytest.mark.integration
def test_the_engine_packs_a_grouped_query_models_decode_and_computes_what_sdpa_does(
    tiny_model_dir,
):
    packed, _, info = _load(tiny_model_dir)
    assert info["attn_implementation"] == PACKED_SDPA  # the tiny Llama: 4 heads on 2
    plain, _, plain_info = _load(tiny_model_dir, attn="sdpa")
    assert plain_info["attn_implementation"] == "sdpa"  # named in the scenario: kept
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = (ids != 0).long()  # left padding, as the engine pads

    def run(model):
        with torch.inference_mode():
            return model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=6,
                min_new_tokens=6,
                do_sample=False,
                cache_implementation="static",
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=0,
            )

    a, b = run(packed), run(plain)
    assert torch.equal(a.sequences, b.sequences)
    for step_a, step_b in zip(a.logits, b.logits, strict=True):
        torch.testing.assert_close(step_a, step_b, atol=1e-5, rtol=1e-5)


class Config:
    def __init__(self, heads: int, kv_heads: int, attn: str = "sdpa") -> None:
        self.num_attention_heads, self.num_key_value_heads = heads, kv_heads
        self._attn_implementation = attn


class Model:
    def __init__(self, config: Config) -> None:
        self.config, self.set_to = config, None

    def set_attn_implementation(self, name: str) -> None:
        self.set_to = name


@pytest.mark.parametrize(
    ("config", "spec", "expected"),
    [
        (Config(32, 8), {}, PACKED_SDPA),
        (Config(32, 32), {}, None),  # no groups: nothing to pack
        (Config(32, 8, attn="eager"), {}, None),  # transformers did not give it SDPA
        (Config(32, 8), {"attn_implementation": "sdpa"}, None),  # named in the scenario
        (Config(32, 8), {"mode": "continuous"}, None),  # paged attention, its own kernels
    ],
)
def test_when_the_engine_packs_decode_attention(config, spec, expected):
    model = Model(config)
    from loadtest.config.transformers_spec import TransformersSpec

    fields = {"mode": "static", "attn_implementation": None, **spec}
    pack_decode_attention(model, TransformersSpec.model_construct(model="m", **fields))
    assert model.set_to == expected
