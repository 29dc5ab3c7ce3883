"""Where an HTTP client's tokenizer comes from: a folder, the hub's cache, then the hub itself
(asked once, briefly, before a download), never the hub under HF_HUB_OFFLINE."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from loadtest.backends import hf_tokenizer
from loadtest.workload.tokenizer import ByteTokenizer


@pytest.fixture
def tries(monkeypatch):
    import transformers

    calls: list[tuple[str, bool]] = []

    def from_pretrained(target, local_files_only, trust_remote_code):
        calls.append((target, local_files_only))
        raise OSError("not here")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    monkeypatch.setattr(hf_tokenizer, "_on_the_hub", lambda model: model == "org/model")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return calls


def test_the_cache_first_then_the_hub(tries, tmp_path):
    tok = hf_tokenizer.load_tokenizer("org/model", tmp_path, False, download=True)
    assert isinstance(tok, ByteTokenizer)  # neither had it
    assert tries == [("org/model", True), ("org/model", False)]


def test_no_download_when_offline_or_unreachable_or_not_asked(tries, tmp_path, monkeypatch):
    hf_tokenizer.load_tokenizer("org/other", tmp_path, False, download=True)  # hub: no answer
    hf_tokenizer.load_tokenizer("org/model", tmp_path, False)  # the engine's own models
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf_tokenizer.load_tokenizer("org/model", tmp_path, False, download=True)
    assert [local for _, local in tries] == [True, True, True]


def test_a_name_that_is_no_repo_id_is_never_looked_up():
    assert not hf_tokenizer._on_the_hub("stub-model")
    assert not hf_tokenizer._on_the_hub("../etc/passwd")
