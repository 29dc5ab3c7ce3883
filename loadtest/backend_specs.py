"""Scenario models of the systems under test, one per ``kind``.

They live here, apart from the backends, so that validating a scenario never imports torch or
transformers. Each backend module registers its implementation under the same ``kind``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .scenario_types import Duration


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, validate_default=True)

    def preflight(self, base_dir: Path) -> list[tuple[tuple, str]]:
        """Cheap checks of referenced files (no imports of heavy modules): ``[(field_path, message)]``."""
        return []


class Stall(Spec):
    at: Duration = Field(description="When the stall starts, from t0 (e.g. 10s).")
    for_: Duration = Field(alias="for", description="How long nothing progresses (e.g. 2s).")


class SimSpec(Spec):
    """A FIFO server with ``max_concurrency`` slots; the harness's test double and a dry-run mode."""

    kind: Literal["sim"] = "sim"
    max_concurrency: int = Field(1, ge=1, description="Requests served at once; the rest wait FIFO.")
    prefill_ms_per_token: float = Field(0.1, ge=0, description="Time to first token per input token, after a slot is free.")
    decode_ms_per_token: float = Field(5.0, ge=0, description="Time between output tokens.")
    stalls: tuple[Stall, ...] = Field((), description="Intervals with no progress: [{at: 10s, for: 2s}].")
    fail_every: int | None = Field(None, ge=1, description="Every Nth submitted request fails (SimulatedFailure).")
    kv_capacity_tokens: int | None = Field(None, ge=1, description="KV memory: a request whose tokens would overflow it "
                                           "among those in flight fails with CudaOOM (simulates batches too big to fit).")


class NoopSpec(Spec):
    """Answers every request at once with all its tokens: measures the harness alone."""

    kind: Literal["noop"] = "noop"


class ContinuousSpec(Spec):
    """transformers' continuous-batching manager settings; unset = the manager's own choice."""

    block_size: int | None = Field(None, ge=1, description="KV-cache page/block size in tokens.")
    num_blocks: int | None = Field(None, ge=1, description="KV-cache blocks (default: sized from free memory).")
    max_batch_tokens: int | None = Field(None, ge=1, description="Most tokens in one step across the batch.")
    use_cuda_graph: bool | None = Field(None, description="Capture steps in CUDA graphs (default: the manager decides).")


class TransformersSpec(Spec):
    """A Hugging Face transformers model run in-process, in an engine worker process."""

    kind: Literal["transformers"] = "transformers"
    model: str = Field(description="Local model directory, hub id (from the local cache), or dummy:<architecture>.")
    mode: Literal["single", "static", "continuous"] = Field(
        "static", description="single: batch 1; static: padded dynamic batches; continuous: in-flight batching.")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto picks cuda:0 when there is a GPU.")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field("auto", description="auto: bfloat16 on CUDA, float32 on CPU.")
    attn_implementation: str | None = Field(None, description="eager, sdpa, flash_attention_2, ... (default: transformers' choice).")
    compile: bool = Field(False, description="Static KV cache + torch.compile (CUDA graphs) for decode.")
    max_batch_size: int = Field(8, ge=1, description="static: the largest batch; continuous: most requests per step.")
    max_wait_ms: float = Field(5.0, ge=0, description="static: longest a request waits for its batch to fill.")
    seed: int = Field(0, ge=0, description="torch seed for dummy weights and sampling.")
    trust_remote_code: bool = Field(False, description="Run code shipped with the model (stated in the report when on).")
    continuous: ContinuousSpec = Field(default_factory=ContinuousSpec, description="continuous mode: manager settings.")

    def preflight(self, base_dir: Path) -> list[tuple[tuple, str]]:
        if self.model.startswith("dummy:"):
            from .model_shapes import DUMMY_ARCHITECTURES

            arch = self.model.split(":", 1)[1]
            if arch not in DUMMY_ARCHITECTURES:
                return [(("backend", "model"), f"unknown dummy architecture {arch!r}; known: {', '.join(sorted(DUMMY_ARCHITECTURES))}")]
            return []
        path = Path(os.path.expanduser(self.model))
        if not path.is_absolute():
            path = base_dir / path
        if path.is_dir():
            if not (path / "config.json").is_file():
                return [(("backend", "model"), f"{path} has no config.json: not a Hugging Face model directory")]
            return []
        if self.model.count("/") == 1 and not self.model.startswith((".", "/", "~")) and _in_hub_cache(self.model):
            return []
        return [(("backend", "model"), f"model {self.model!r} not found: no such directory, and not in the local Hugging Face cache")]


def _in_hub_cache(repo_id: str) -> bool:
    home = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub").expanduser()
    return (home / ("models--" + repo_id.replace("/", "--"))).is_dir()


BackendSpec = Annotated[Union[SimSpec, NoopSpec, TransformersSpec], Field(discriminator="kind")]
