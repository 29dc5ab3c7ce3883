"""How one rank's part of a model is cut from the whole: the model's own tensor-parallel plan,
applied the Megatron way (in the engine worker).

transformers ships a plan with each architecture: ``config.base_model_tp_plan`` maps the base
model's layers to a style, and the causal-LM class's ``_tp_plan`` names the ``lm_head``'s. The
plans differ between transformers versions (5.17 adds ``embed_tokens: embedding_rowwise`` to a
tied-embedding model's plan, 5.24 does not; 4.56 names the head ``colwise_rep``, 5.x
``colwise_gather_output``), so each style below is applied by what it means, whatever the
version calls it:

- ``colwise``: a layer keeps 1/n of its output features (whole attention heads, whole MLP
  columns); the model is built at the local shape (heads, KV heads, MLP width divided by n).
- ``rowwise``: 1/n of its input features; its output, a partial sum, is all-reduced.
- ``embedding_rowwise``: the vocabulary is split (a rank holds ``ceil(V/n)`` rows, the last
  rank's tail zero); a token outside the rank's rows looks up zeros, and the lookups are
  all-reduced. The ``lm_head`` then holds the same rows (they are one tensor when tied) and its
  logits are gathered and cut back to V. A head planned ``colwise*`` splits the vocabulary the
  same way: every plan that splits either, splits both, as Megatron and vLLM do.
- ``replicate``, ``replicated_with_grad_allreduce``: whole on every rank (a Qwen3 q/k norm).

Any other style is refused before any GPU work, naming the layer and the style. The collectives
are torch's functional ones, which torch.compile traces into the decode graph, so a compiled
split step runs its all-reduces inside the CUDA graph.

On CUDA the small all-reduces (a decode step's: rows x hidden) are one-shot over symmetric
memory (``all_reduce: one_shot``, the default there): each rank copies its partial sum into a
buffer every rank of the group can read over NVLink, then sums the group's copies, in one
kernel with no NCCL call. A decode step has two all-reduces a layer, each a few microseconds of
data behind NCCL's fixed latency, so at small batches their latency is a large share of a split
step (docs/benchmarks.md §10). Larger ones (a prefill's) stay NCCL's. The buffer is plain
peer-to-peer memory: no NVLink multicast.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.distributed import ProcessGroup
    from torch.nn import Embedding, Linear
    from transformers import PretrainedConfig, PreTrainedModel

SPLIT_FIELDS = ("num_attention_heads", "num_key_value_heads", "intermediate_size")
COLWISE = ("colwise", "local_colwise")
ROWWISE = ("rowwise", "local_rowwise")
VOCABULARY = ("embedding_rowwise",)
WHOLE = ("replicate", "replicated_with_grad_allreduce")
HEAD_SPLIT = ("colwise", "colwise_rep", "colwise_gather_output")
EMBEDDING = "embed_tokens"
HEAD = "lm_head"

# The largest all-reduce done one-shot (bytes): a one-shot reads every peer's whole buffer, so
# past a few hundred kilobytes NCCL's ring is faster (vLLM's custom all-reduce stops about here).
ONE_SHOT_BYTES = 1 << 20
_one_shot: dict[str, Any] = {}  # "buffer": this rank's symmetric buffer; "group": its group name


@functools.lru_cache(maxsize=1)
def _modules() -> tuple[type[Linear], type[Embedding], type[Linear]]:
    """The split layers as torch modules (defined on first use: torch is imported lazily)."""
    import torch
    import torch.nn.functional as F
    from torch.distributed import _functional_collectives as fc

    # torch 2.13 renamed the gather (the old name warns); the GPU hosts' 2.11 may have only it
    gather = getattr(fc, "all_gather_single", None) or fc.all_gather_tensor

    def summed(t: Tensor) -> Tensor:
        buffer = _one_shot.get("buffer")
        if buffer is not None and t.dtype == buffer.dtype and t.numel() <= buffer.numel():
            t = t.contiguous()
            return one_shot_sum(buffer[: t.numel()].view(t.shape), t, _one_shot["group"])
        return fc.all_reduce(t, "sum", _world())

    class RowwiseLinear(torch.nn.Linear):
        """A rowwise layer: this rank's share of the inputs, the sum over the ranks."""

        def forward(self, x: Tensor) -> Tensor:
            return summed(F.linear(x, self.weight, self.bias))

    class VocabularyEmbedding(torch.nn.Embedding):
        """Rows ``first .. first + num_embeddings`` of the vocabulary; the others look up 0."""

        first: int = 0

        def forward(self, ids: Tensor) -> Tensor:
            local = ids - self.first
            outside = (local < 0) | (local >= self.num_embeddings)
            found = F.embedding(local.masked_fill(outside, 0), self.weight)
            return summed(found.masked_fill(outside.unsqueeze(-1), 0))

    class VocabularyHead(torch.nn.Linear):
        """This rank's rows of the vocabulary's logits, gathered from every rank, cut to V."""

        vocab_size: int = 0

        def forward(self, x: Tensor) -> Tensor:
            part = F.linear(x, self.weight, self.bias)
            whole = gather(part.contiguous(), part.dim() - 1, _world())
            return whole[..., : self.vocab_size]

    return RowwiseLinear, VocabularyEmbedding, VocabularyHead


def one_shot_sum(shared: Tensor, t: Tensor, group: str) -> Tensor:
    """``t`` summed over the group: copied into ``shared`` (this rank's view of the symmetric
    buffer, ``t``'s shape), then every rank's copy read and added, in one kernel."""
    import torch

    return torch.ops.symm_mem.one_shot_all_reduce_copy(shared, t, "sum", group)


def use_one_shot(dtype: torch.dtype, device: torch.device) -> str | None:
    """Set up this rank's one-shot all-reduce (every rank of the group at once: the buffer's
    rendezvous is a collective); why not where it cannot (None: it is in use)."""
    import torch
    import torch.distributed as dist

    if device.type != "cuda":
        return "not on CUDA"
    try:
        import torch.distributed._symmetric_memory as symm_mem

        group = _world()
        rows = ONE_SHOT_BYTES // torch.tensor([], dtype=dtype).element_size()
        buffer = symm_mem.empty(rows, dtype=dtype, device=device)
        symm_mem.rendezvous(buffer, group)
        torch._dynamo.mark_static_address(buffer)  # a CUDA graph reads it where it is
        dist.barrier(group)
    except Exception as exc:  # no peer access, no symmetric memory in this torch or driver
        return f"symmetric memory unavailable ({type(exc).__name__}: {str(exc)[:200]})"
    _one_shot.update(buffer=buffer, group=group.group_name)
    return None


def _world() -> ProcessGroup:
    import torch.distributed as dist

    world = dist.group.WORLD
    assert world is not None  # joined (parallel.join_group) before any split layer runs
    return world


def checkpoint_config(directory: Path) -> PretrainedConfig:
    """A checkpoint's config, read from its folder."""
    import transformers

    return transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True)


def head_style(config: PretrainedConfig) -> str | None:
    """The lm_head's style in the causal-LM class's own plan (``_tp_plan``), if it has one."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        return None
    return dict(getattr(cls, "_tp_plan", None) or {}).get(HEAD)


def plan_of(config: PretrainedConfig) -> dict[str, str]:
    """The model's plan (base layers, and ``lm_head`` from its class), refused if a layer has a
    style this split does not apply."""
    plan = dict(getattr(config, "base_model_tp_plan", None) or {})
    if not plan:
        raise ValueError(f"{config.model_type}: the model declares no tensor-parallel plan")
    if (head := head_style(config)) is not None:
        plan[HEAD] = head
    known = COLWISE + ROWWISE + VOCABULARY + WHOLE
    for layer, style in plan.items():
        if style not in (HEAD_SPLIT if layer == HEAD else known):
            raise ValueError(
                f"{config.model_type}: tensor_parallel cannot apply this model's plan: layer "
                f"{layer!r} is {style!r} (applied: {', '.join(known)}; lm_head "
                f"{', '.join(HEAD_SPLIT)})"
            )
    if any(s in VOCABULARY for s in plan.values()) and EMBEDDING not in plan:
        raise ValueError(
            f"{config.model_type}: a vocabulary split of a layer other than embed_tokens"
        )
    return plan


def splits_vocabulary(plan: dict[str, str]) -> bool:
    return plan.get(EMBEDDING) in VOCABULARY or plan.get(HEAD) in HEAD_SPLIT


def vocabulary_rows(vocab_size: int, size: int) -> int:
    """Rows of the vocabulary each rank holds (the last rank's tail is padding)."""
    return -(-vocab_size // size)


def local_config(config: PretrainedConfig, size: int, plan: dict[str, str]) -> PretrainedConfig:
    """The config one rank's part is built from: heads, KV heads and MLP width divided by
    ``size``; with a split vocabulary, ``vocabulary_rows`` of it."""
    local = copy.deepcopy(config)
    if getattr(local, "head_dim", None) is None:
        local.head_dim = config.hidden_size // config.num_attention_heads
    for name in SPLIT_FIELDS:
        value = getattr(config, name, None)
        if name == "num_key_value_heads" and value is None:
            value = config.num_attention_heads
        if value is None or value % size:
            raise ValueError(f"{name} = {value} does not split over {size} devices")
        setattr(local, name, value // size)
    if splits_vocabulary(plan):
        local.vocab_size = vocabulary_rows(config.vocab_size, size)
        local.pad_token_id = None  # a padding row may lie in another rank's rows
    return local


def _matcher(plan: dict[str, str], styles: tuple[str, ...]) -> re.Pattern:
    keys = [re.escape(k).replace(r"\*", r"\d+") for k, v in plan.items() if v in styles]
    return re.compile(rf"^(?:{'|'.join(keys)})$") if keys else re.compile(r"(?!)")


def apply(
    model: PreTrainedModel, config: PretrainedConfig, plan: dict[str, str], rank: int, size: int
) -> dict[str, int]:
    """Turn the locally shaped ``model`` into this rank's part: rowwise layers sum, a split
    vocabulary looks up and gathers. ``config`` is the whole model's; returns what was split."""
    rowwise_cls, embedding_cls, head_cls = _modules()
    rowwise = _matcher(plan, ROWWISE)
    summed = 0
    for name, module in model.base_model.named_modules():
        if rowwise.match(name):
            module.__class__ = rowwise_cls
            summed += 1
    split = {"rowwise_all_reduces": summed, "vocabulary_rows": 0}
    if splits_vocabulary(plan):
        rows = vocabulary_rows(config.vocab_size, size)
        embedding = model.get_input_embeddings()
        embedding.__class__ = embedding_cls
        # the split classes' own fields (the layers were made as torch's, then re-classed)
        setattr(embedding, "first", rank * rows)  # noqa: B010
        setattr(embedding, "padding_idx", None)  # noqa: B010
        head = model.get_output_embeddings()
        head.__class__ = head_cls
        setattr(head, "vocab_size", config.vocab_size)  # noqa: B010
        model.config.vocab_size = config.vocab_size  # the logits are whole again
        model.config.pad_token_id = config.pad_token_id
        split["vocabulary_rows"] = rows
    return split


def load_slices(
    model: PreTrainedModel, directory: Path, rank: int, size: int, plan: dict[str, str]
) -> None:
    """This rank's slices of a safetensors checkpoint into the local model, slice by slice."""
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: tensor_parallel loads safetensors checkpoints; none here")
    colwise, rowwise = _matcher(plan, COLWISE), _matcher(plan, ROWWISE)
    vocabulary = splits_vocabulary(plan)
    prefix = model.base_model_prefix + "."
    params = dict(model.named_parameters(remove_duplicate=False))
    seen = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                target = params.get(name)
                if target is None:
                    continue
                module, _, kind = name.removeprefix(prefix).rpartition(".")
                part = f.get_slice(name)
                shape = part.get_shape()
                if vocabulary and module in (EMBEDDING, HEAD):
                    rows = target.shape[0]
                    tensor = part[rank * rows : min((rank + 1) * rows, shape[0])]
                    target.data.zero_()  # the last rank's padding rows
                    target.data[: tensor.shape[0]].copy_(tensor.to(target.dtype))
                    seen.add(name)
                    continue
                if colwise.match(module):
                    n = shape[0] // size
                    tensor = part[rank * n : (rank + 1) * n]
                elif rowwise.match(module) and kind == "weight":
                    n = shape[1] // size
                    tensor = part[:, rank * n : (rank + 1) * n]
                elif rowwise.match(module):  # a rowwise bias is added once, after the sum
                    tensor = part[:] if rank == 0 else part[:] * 0
                else:
                    tensor = part[:]
                target.data.copy_(tensor.to(target.dtype))
                seen.add(name)
    missing = set(params) - seen
    if model.config.tie_word_embeddings:
        model.tie_weights()
        missing.discard(f"{HEAD}.weight")
    if missing:
        raise ValueError(f"{directory}: the checkpoint lacks {sorted(missing)[:5]}")


def describe(
    local: PretrainedConfig,
    plan: dict[str, str],
    size: int,
    split: dict[str, int],
    one_shot_off: str | None,
) -> dict:
    """What the split is, for the result (``one_shot_off``: why the all-reduces are all NCCL's,
    None where the small ones are one-shot)."""
    vocabulary = (
        f"; the vocabulary split ({split['vocabulary_rows']} rows a rank; embed_tokens' "
        "lookups all-reduced, lm_head's logits gathered)"
        if split["vocabulary_rows"]
        else "; embeddings and lm_head whole on every rank"
    )
    return {
        "size": size,
        "split": "Megatron, per the model's own plan: colwise/rowwise, an all-reduce after "
        f"each rowwise layer ({split['rowwise_all_reduces']}){vocabulary}",
        "plan_styles": sorted(set(plan.values())),
        "per_rank": {name: getattr(local, name) for name in SPLIT_FIELDS},
        "vocabulary_rows": split["vocabulary_rows"] or None,
        "all_reduce": (
            f"one-shot over symmetric memory up to {ONE_SHOT_BYTES // 1024} KiB, NCCL above"
            if one_shot_off is None
            else f"the process group's (NCCL on CUDA, gloo on the CPU): {one_shot_off}"
        ),
        "note": "parameters, parameter_bytes and the roofline count one rank's part: per GPU",
    }
