"""The environment manifest reads only what is there to read."""

from __future__ import annotations

import importlib.machinery
import sys
import types

from loadtest.telemetry import environment


def test_a_module_another_thread_is_still_importing_is_left_out(monkeypatch):
    """A backend's tokenizer thread may be halfway through importing torch when a start timeout
    fires and the result is written: the half-made module has no ``version`` yet."""
    half = types.ModuleType("torch")
    half.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    half.__spec__._initializing = True  # what CPython sets until the import completes
    monkeypatch.setitem(sys.modules, "torch", half)
    env = environment.collect({"schedule": 0}, "digest", gpus=False)
    assert "torch" not in env.view() and "torch_cuda" not in env.view()
    half.__spec__._initializing = False
    half.__version__ = "9.9"
    half.version = types.SimpleNamespace(cuda="13.0")
    env = environment.collect({"schedule": 0}, "digest", gpus=False)
    assert (env.torch, env.torch_cuda) == ("9.9", "13.0")
