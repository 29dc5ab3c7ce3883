"""``kind: transformers``: a Hugging Face model in engine processes this harness starts, and its
checks of the model folder, the device layout and the decode settings (no torch imported)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from loadtest.config.spec import Problem, Spec
from loadtest.config.types import PositiveDuration, as_written
from loadtest.core import outside


class ContinuousSpec(Spec):
    """transformers' continuous-batching manager settings; unset = the manager's own choice."""

    block_size: int | None = Field(None, ge=1, description="KV-cache page/block size in tokens.")
    num_blocks: int | None = Field(
        None, ge=1, description="KV-cache blocks (default: sized from free memory)."
    )
    max_batch_tokens: int | None = Field(
        None, ge=1, description="Most tokens in one step across the batch."
    )
    use_cuda_graph: bool | None = Field(
        None, description="Capture steps in CUDA graphs (default: the manager decides)."
    )


class TransformersSpec(Spec):
    """A Hugging Face transformers model run in-process, in an engine worker process."""

    kind: Literal["transformers"] = "transformers"
    stamps_in_client_loop: ClassVar[bool] = False  # the engine process stamps its tokens
    workers_refused: ClassVar[str | None] = (
        "the engine is one model in one process: each worker would load a copy of its own"
    )
    start_timeout: PositiveDuration = Field(
        as_written("30m"),
        description="Longest loading and warm-up (compilation included) may take before the run "
        "fails; a worker that stops answering any other command fails it within a minute.",
    )
    model: str = Field(
        description="Local model directory, hub id (from the local cache), or dummy:<architecture>."
    )
    api: Literal["generate", "embeddings"] = Field(
        "generate",
        description="generate: a causal LM's tokens; embeddings: an encoder's pooled vector "
        "a text (workload.inputs_per_request texts a request), a forward pass a batch, batched "
        "by the static batcher (mode static or single).",
    )
    mode: Literal["single", "static", "continuous"] = Field(
        "static",
        description="single: batch 1; static: padded dynamic batches; continuous: in-flight batching.",
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="auto picks cuda:0 when there is a GPU.",
    )
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 on CUDA, float32 on CPU."
    )
    attn_implementation: str | None = Field(
        None,
        description="eager, sdpa, sdpa_packed_gqa, flash_attention_2, ... (default: "
        "transformers' choice, except that a grouped-query model given sdpa outside continuous "
        "mode runs sdpa_packed_gqa: SDPA with a decode step's query heads packed onto their "
        "key/value heads, not a copy of the KV cache per query head).",
    )
    sdpa_backends: tuple[Literal["flash", "efficient", "cudnn", "math"], ...] | None = Field(
        None,
        description="On CUDA, the scaled-dot-product-attention kernels torch may pick (default: "
        "flash, efficient, math: cuDNN attention builds an execution plan for every new shape, "
        "a CPU cost per decode step when prompt lengths vary).",
    )
    batch_buckets: bool | list[Annotated[int, Field(ge=1)]] | None = Field(
        None,
        description="static mode: pad each batch with throw-away rows (copies of its first, "
        "which stop with it) up to the next of these sizes (true: the powers of two, from 2 "
        "with compile and pad_decode false; max_batch_size is always one), so only they are "
        "warmed and captured (default: on with compile, off in eager mode).",
    )
    prompt_bucket: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="static mode: pad each batch's prompt width up to a multiple of this many "
        "tokens, so batches share shapes (default 1: no padding; with eager decode the padded "
        "prefill and attention can cost more than the shared shapes save).",
    )
    compile: bool = Field(
        False, description="Static KV cache + torch.compile (CUDA graphs) for decode."
    )
    pad_decode: bool | None = Field(
        None,
        description="static mode with compile: run every decode step at max_batch_size rows "
        "(copies of the batch's first row fill it; the prefill runs at the batch's own rows), "
        "so one static graph serves every batch, where false gives one graph with a dynamic "
        "batch dimension, a longer compile (default: on, unless the model's cache has layers "
        "other than attention's, e.g. linear attention).",
    )
    decode_loop: Literal["pipelined", "generate"] | None = Field(
        None,
        description="padded compiled decode: pipelined runs each whole decode step (forward, "
        "argmax, next position) as one compiled call and queues the next step before waiting "
        "for this one's tokens, so the GPU never waits for the host; generate uses "
        "transformers' generate(), which waits for every step and then does its own host work "
        "(default: pipelined where decode steps are padded and the model's generation config "
        "asks for no logits processing, e.g. a repetition penalty).",
    )
    compile_options: dict[str, bool | int | float | str] | None = Field(
        None,
        description="With compile: torch inductor options for the decode step, e.g. "
        "{max_autotune: true} (default: the pattern matcher, loop reordering after fusion "
        "and pointwise autotuning off: passes that lengthen a cold compile and give the decode "
        "step nothing; {} for torch's own). CUDA graphs stay on unless "
        "triton.cudagraphs: false.",
    )
    devices: list[Annotated[str, Field(pattern=r"^(cpu|cuda:\d+)$")]] | None = Field(
        None,
        min_length=1,
        description="Several devices, e.g. [cuda:0, cuda:1]: split into groups of "
        "tensor_parallel, each group one replica (an engine of its own) behind one queue; "
        "the harness sends each request to the replica with the fewest outstanding.",
    )
    replicas: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Shorthand for devices: this many replicas, each of tensor_parallel "
        "devices, on cuda:0, cuda:1, ... (or all on cpu with device: cpu).",
    )
    tensor_parallel: int = Field(
        1,
        ge=1,
        le=64,
        description="Split the model over this many devices (Megatron-style, from the "
        "model's own plan), a process each, stepping together: static or single mode; "
        "with compile, the all-reduces run inside the decode step's CUDA graph.",
    )
    all_reduce: Literal["one_shot", "nccl"] | None = Field(
        None,
        description="tensor_parallel on CUDA: one_shot sums a decode step's small all-reduces "
        "in one kernel over symmetric (peer-to-peer) memory, without NCCL's per-call latency; "
        "larger ones, and nccl, use NCCL (default: one_shot where the GPUs can map each "
        "other's memory).",
    )
    cpu_affinity: Literal["blocks", "none"] = Field(
        "blocks",
        description="GPU engines: blocks pins each engine process to a block of CPUs of its "
        "own (one left to the harness) and sizes torch's CPU threads to it, so engines do "
        "not contend for cores; none leaves placement to the OS (torch's threads: all cores).",
    )
    max_batch_size: int = Field(
        8, ge=1, description="static: the largest batch; continuous: most requests per step."
    )
    max_wait_ms: float = Field(
        5.0, ge=0, description="static: longest a request waits for its batch to fill."
    )
    seed: int = Field(0, ge=0, description="torch seed for dummy weights and sampling.")
    trust_remote_code: bool = Field(
        False, description="Run code shipped with the model (stated in the report when on)."
    )
    continuous: ContinuousSpec = Field(
        default_factory=ContinuousSpec, description="continuous mode: manager settings."
    )

    def device_groups(self) -> list[tuple[str, ...]]:
        """The engines to start: each a tuple of the devices of one tensor-parallel group."""
        tp = self.tensor_parallel
        if self.devices:
            devices = list(self.devices)
        else:
            n = (self.replicas or 1) * tp
            if n == 1:
                return [(self.device,)]
            first = int(self.device.split(":")[1]) if self.device.startswith("cuda:") else 0
            cpu = self.device == "cpu"
            devices = ["cpu" if cpu else f"cuda:{first + i}" for i in range(n)]
        return [tuple(devices[i : i + tp]) for i in range(0, len(devices), tp)]

    def preflight(self, base_dir: Path) -> list[Problem]:
        """Problems found before loading: the device layout, padded decode steps without
        compiled static batches, an unknown ``dummy:`` architecture, a missing or non-model
        path, a model that does not split."""
        return preflight(self, base_dir)


def _layout_problems(spec: TransformersSpec) -> list[Problem]:
    """Devices, replicas and tensor parallelism that do not go together."""
    out: list[Problem] = []
    tp = spec.tensor_parallel
    if spec.devices:
        if spec.replicas is not None:
            out.append((("backend", "replicas"), "give devices or replicas, not both"))
        if spec.device != "auto":
            out.append((("backend", "device"), "give device (one) or devices, not both"))
        if len(spec.devices) % tp:
            out.append(
                (
                    ("backend", "devices"),
                    f"{len(spec.devices)} devices do not split into tensor-parallel groups of {tp}",
                )
            )
        gpus = [d for d in spec.devices if d != "cpu"]
        twice = sorted({d for d in gpus if gpus.count(d) > 1})
        if twice:
            out.append((("backend", "devices"), f"{twice[0]} twice: one engine per GPU"))
    if tp > 1 and spec.mode == "continuous":
        out.append(
            (
                ("backend", "tensor_parallel"),
                "continuous batching runs its own loop, which the ranks cannot follow: "
                "use mode static or single",
            )
        )
    return out


def _split_problems(spec: TransformersSpec, config: dict, what: str) -> list[Problem]:
    tp = spec.tensor_parallel
    if tp == 1:
        return []
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = config.get(name)
        if value is None and name == "num_key_value_heads":
            value = config.get("num_attention_heads")
        if value is None:
            continue  # not this kind of model: loading says so
        if not isinstance(value, int) or value % tp:
            return [
                (
                    ("backend", "tensor_parallel"),
                    f"{what}: {name} = {value} does not split over {tp} devices",
                )
            ]
    return []


def preflight(spec: TransformersSpec, base_dir: Path) -> list[Problem]:
    """Problems found before loading: the device layout, padded decode steps without
    compiled static batches, an unknown ``dummy:`` architecture, a missing or non-model
    path, a model that does not split."""
    return (
        _extra_problems(spec)
        + _layout_problems(spec)
        + _decode_problems(spec)
        + _api_problems(spec)
        + _model_problems(spec, base_dir)
    )


def _extra_problems(spec: TransformersSpec) -> list[Problem]:
    """An install without the transformers extra (``pip install llm-loadtest``: served models
    and the simulator only) is told which extra a local model needs, before anything
    starts."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if not missing:
        return []
    return [
        (
            ("backend", "kind"),
            f"kind: transformers needs {' and '.join(missing)}, which this install lacks: "
            "pip install 'llm-loadtest[transformers]' (on a GPU machine, torch for your CUDA "
            "first)",
        )
    ]


def _api_problems(spec: TransformersSpec) -> list[Problem]:
    """An embeddings engine runs one forward pass a batch: the static batcher's, eager."""
    if spec.api != "embeddings":
        return []
    out: list[Problem] = []
    if spec.mode == "continuous":
        out.append((("backend", "mode"), "api: embeddings batches with mode static or single"))
    if spec.compile:
        out.append((("backend", "compile"), "api: embeddings runs eager (compile: false)"))
    if spec.tensor_parallel > 1:
        out.append((("backend", "tensor_parallel"), "api: embeddings runs on one device a replica"))
    if spec.model.startswith("dummy:"):
        from loadtest.config.model_shapes import DUMMY_ARCHITECTURES, ENCODER_TYPES

        arch = DUMMY_ARCHITECTURES.get(spec.model.split(":", 1)[1], {})
        if arch and arch.get("model_type") not in ENCODER_TYPES:
            out.append(
                (
                    ("backend", "model"),
                    f"{spec.model} is a decoder: api: embeddings takes an encoder "
                    "(dummy:tiny-bert, dummy:bert-base, dummy:bert-large, or a folder)",
                )
            )
    return out


def _decode_problems(spec: TransformersSpec) -> list[Problem]:
    problems: list[Problem] = []
    if spec.pad_decode and not (spec.compile and spec.mode == "static"):
        problems.append(
            (
                ("backend", "pad_decode"),
                "pads the compiled decode steps of static batches: it needs compile: true "
                "and mode: static",
            )
        )
    if spec.decode_loop == "pipelined" and (
        spec.pad_decode is False or not (spec.compile and spec.mode == "static")
    ):
        problems.append(
            (
                ("backend", "decode_loop"),
                "pipelined decodes padded compiled steps: it needs compile: true, mode: "
                "static and pad_decode not false",
            )
        )
    return problems


def _model_problems(spec: TransformersSpec, base_dir: Path) -> list[Problem]:
    if spec.model.startswith("dummy:"):
        from loadtest.config.model_shapes import DUMMY_ARCHITECTURES

        arch = spec.model.split(":", 1)[1]
        if arch not in DUMMY_ARCHITECTURES:
            return [
                (
                    ("backend", "model"),
                    f"unknown dummy architecture {arch!r}; known: {', '.join(sorted(DUMMY_ARCHITECTURES))}",
                )
            ]
        return _split_problems(spec, DUMMY_ARCHITECTURES[arch], spec.model)
    path = Path(os.path.expanduser(spec.model))
    if not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        if not (path / "config.json").is_file():
            return [
                (
                    ("backend", "model"),
                    f"{path} has no config.json: not a Hugging Face model directory",
                )
            ]
        return _split_problems(spec, _read_config(path / "config.json"), str(path))
    if (
        spec.model.count("/") == 1
        and not spec.model.startswith((".", "/", "~"))
        and _in_hub_cache(spec.model)
    ):
        return []
    return [
        (
            ("backend", "model"),
            f"model {spec.model!r} not found: no such directory, and not in the local Hugging Face cache",
        )
    ]


CONFIG_BYTES = 16 << 20  # a model's config.json: larger is not a config


def _read_config(path: Path) -> dict:
    import json

    try:
        config = json.loads(outside.read_text(path, CONFIG_BYTES))
    except (OSError, ValueError):
        return {}  # loading says what is wrong with it
    return config if isinstance(config, dict) else {}


def _in_hub_cache(repo_id: str) -> bool:
    home = Path(
        os.getenv("HF_HUB_CACHE") or Path(os.getenv("HF_HOME", "~/.cache/huggingface")) / "hub"
    ).expanduser()
    return (home / ("models--" + repo_id.replace("/", "--"))).is_dir()
