"""The checks of a ``kind: transformers`` spec made before anything loads: the device layout,
the decode settings, the API, the extra installed, and the model folder (no torch imported)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from loadtest.config.spec import Problem
from loadtest.config.transformers_spec import TransformersSpec


def layout_problems(spec: TransformersSpec) -> list[Problem]:
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
        + layout_problems(spec)
        + _decode_problems(spec)
        + _api_problems(spec)
        + _model_problems(spec, base_dir)
    )


def _extra_problems(spec: TransformersSpec) -> list[Problem]:
    """An install without the transformers extra (``pip install loadtest``: served models
    and the simulator only) is told which extra a local model needs, before anything
    starts."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if not missing:
        return []
    return [
        (
            ("backend", "kind"),
            f"kind: transformers needs {' and '.join(missing)}, which this install lacks: "
            "pip install 'loadtest[transformers]' (on a GPU machine, torch for your CUDA "
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


def _read_config(path: Path) -> dict:
    import json

    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # loading says what is wrong with it
    return config if isinstance(config, dict) else {}


def _in_hub_cache(repo_id: str) -> bool:
    home = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub"
    ).expanduser()
    return (home / ("models--" + repo_id.replace("/", "--"))).is_dir()
