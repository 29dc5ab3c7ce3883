"""Systems under test. Each ``kind`` maps to the module that implements it, imported on demand
so that a scenario for the ``sim`` backend never imports torch."""

from __future__ import annotations

import importlib

from loadtest.backends.base import Backend, BackendInfo

# kind -> "module:class"; ``class.create(spec, clock, context)`` returns the Backend.
REGISTRY: dict[str, str] = {
    "sim": "loadtest.backends.sim:SimBackend",
    "noop": "loadtest.backends.noop:NoopBackend",
    "transformers": "loadtest.backends.transformers.replicas:ReplicaRouter",  # one engine or several
    "openai": "loadtest.backends.openai.client:OpenAIBackend",
}


def create_backend(spec, clock, context=None) -> Backend:
    """The backend for a spec (its module imported only now: heavy imports stay lazy)."""
    module_name, _, attr = REGISTRY[spec.kind].partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    return cls.create(spec, clock, context)


def combine_facts(spec, details: dict, parts: list[dict]) -> dict:
    """Worker processes' point facts as one run's, the way the spec's backend kind sums them."""
    module_name, _, attr = REGISTRY[spec.kind].partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    return cls.combine_facts(spec, details, parts)


__all__ = ["Backend", "BackendInfo", "REGISTRY", "combine_facts", "create_backend"]
