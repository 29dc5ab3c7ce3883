"""Systems under test. Each ``kind`` maps to the module that implements it, imported on demand
so that a scenario for the ``sim`` backend never imports torch."""

from __future__ import annotations

import importlib
from typing import Any

from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts
from loadtest.config.backend_specs import BackendSpec
from loadtest.core.clock import Clock

# kind -> "module:class"; ``class.create(spec, clock, context)`` returns the Backend.
REGISTRY: dict[str, str] = {
    "sim": "loadtest.backends.sim:SimBackend",
    "noop": "loadtest.backends.noop:NoopBackend",
    "transformers": "loadtest.backends.transformers.replicas:ReplicaRouter",  # one engine or several
    "openai": "loadtest.backends.openai.client:OpenAIBackend",
}


def _kind(spec: BackendSpec) -> type[Backend[Any]]:
    module_name, _, attr = REGISTRY[spec.kind].partition(":")
    cls: type[Backend[Any]] = getattr(importlib.import_module(module_name), attr)
    return cls


def create_backend(
    spec: BackendSpec, clock: Clock, context: BackendContext | None = None
) -> Backend[Any]:
    """The backend for a spec (its module imported only now: heavy imports stay lazy)."""
    return _kind(spec).create(spec, clock, context or BackendContext())


def combine_facts(spec: BackendSpec, details: Facts, parts: list[Facts]) -> Facts:
    """Worker processes' point facts as one run's, the way the spec's backend kind sums them."""
    return _kind(spec).combine_facts(spec, details, parts)


__all__ = [
    "Backend",
    "BackendContext",
    "BackendInfo",
    "REGISTRY",
    "combine_facts",
    "create_backend",
]
