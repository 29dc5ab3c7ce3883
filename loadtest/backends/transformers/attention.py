"""The attention a decode step runs: SDPA, with one step's query heads packed onto the
key/value heads they share, so a grouped-query model reads its KV cache once per step instead of
copying it out once per query head.

Given a mask (a static cache always gives one), transformers' SDPA path repeats the cache's
keys and values up to the query heads' count before calling SDPA (``repeat_kv``), because
SDPA's fused kernels on CUDA take a mask or grouped heads, not both. For a decode step, one
query token, the same attention is SDPA over the key/value heads with each one's group of query
heads as its query length: [B, H, 1, D] as [B, H_kv, H / H_kv, D] against the cache's
[B, H_kv, L, D], the mask broadcast over the group. Nothing is copied, where the copy and the
attention over the copies can be half a compiled step's GPU time at batch 16
(bench/investigations/decode_kernels.py).
Every other call (a prefill, no groups, no mask, a bias per head) is transformers' own SDPA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadtest.config.transformers_spec import TransformersSpec

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

# The name it is registered under with transformers, and recorded as backend.attn_implementation.
PACKED_SDPA = "sdpa_packed_gqa"


def packed_gqa_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,  # transformers' own, passed on as given
) -> tuple[torch.Tensor, None]:
    """An attention function for transformers' ``AttentionInterface``: [B, H, Q, D] queries,
    [B, H_kv, L, D] keys and values, a [B, 1, Q, L] mask; returns [B, Q, H, D]."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    packable = (
        query.shape[2] == 1
        and groups > 1
        and attention_mask is not None
        and attention_mask.shape[1] == 1  # one mask for every head: it broadcasts over a group
        and not any(kwargs.get(k) is not None for k in ("position_bias", "softcap", "cache"))
        and not kwargs.get("output_attentions")
    )
    if not packable:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    batch, heads, _, _ = query.shape
    # query head h reads key/value head h // groups (repeat_kv's order), so a plain reshape
    # puts each group on its key/value head
    packed = query.reshape(batch, key.shape[1], groups, query.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make ``PACKED_SDPA`` an attention implementation transformers accepts, its masks built
    as SDPA's are (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(PACKED_SDPA, packed_gqa_sdpa)
    AttentionMaskInterface.register(PACKED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def pack_decode_attention(model: PreTrainedModel, spec: TransformersSpec) -> None:
    """Switch a grouped-query model that transformers gave SDPA to ``PACKED_SDPA``, unless the
    scenario named an implementation, or runs continuous batching (transformers' paged
    attention, its own kernels)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    if (
        spec.attn_implementation
        or spec.mode == "continuous"
        or getattr(config, "_attn_implementation", None) != "sdpa"
        or not heads
        or kv_heads >= heads
    ):
        return
    register()
    model.set_attn_implementation(PACKED_SDPA)
