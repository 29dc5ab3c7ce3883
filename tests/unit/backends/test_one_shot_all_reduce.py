"""A split layer's all-reduce: one-shot over the symmetric buffer when it fits (a decode step's),
the process group's otherwise (a prefill's), whichever the layer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_an_all_reduce_that_fits_the_buffer_is_one_shot_and_a_larger_one_the_groups(monkeypatch):
    from torch.distributed import _functional_collectives as fc

    from loadtest.backends.transformers import split

    buffer = torch.zeros(64)
    monkeypatch.setattr(split, "_one_shot", {"buffer": buffer, "group": "g0"})
    monkeypatch.setattr(split, "_world", lambda: "world")
    calls: list = []

    def one_shot(shared, t, group):
        calls.append(
            ("one_shot", tuple(shared.shape), shared.data_ptr() == buffer.data_ptr(), group)
        )
        return t * 2  # two ranks holding the same partial sum

    def by_group(t, op, group):
        calls.append(("group", tuple(t.shape), op, group))
        return t * 2

    monkeypatch.setattr(split, "one_shot_sum", one_shot)
    monkeypatch.setattr(fc, "all_reduce", by_group)
    layer = torch.nn.Linear(4, 3, bias=False)
    layer.__class__ = split._modules()[0]  # a rowwise layer
    x = torch.ones(2, 1, 4)
    assert torch.equal(layer(x), 2 * torch.nn.functional.linear(x, layer.weight))
    layer(torch.ones(30, 1, 4))  # 90 values: more than the buffer holds
    layer.to(torch.float64)(torch.ones(2, 1, 4, dtype=torch.float64))  # not the buffer's dtype
    assert calls == [
        ("one_shot", (2, 1, 3), True, "g0"),  # a view of the buffer's first 6, in t's shape
        ("group", (30, 1, 3), "sum", "world"),
        ("group", (2, 1, 3), "sum", "world"),
    ]


def test_without_cuda_the_split_says_its_all_reduces_are_the_process_groups():
    from loadtest.backends.transformers import split

    assert split.use_one_shot(torch.bfloat16, torch.device("cpu")) == "not on CUDA"
