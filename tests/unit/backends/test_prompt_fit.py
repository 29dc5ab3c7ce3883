"""Synthetic prompts the model's tokenizer counts exactly: random ids whose text tokenizes back
to themselves, a shared prefix kept token for token, and text that spells a special token
redrawn (a server reads ``<s>`` in a prompt as the token)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from loadtest.backends.hf_tokenizer import load_tokenizer

    return load_tokenizer(str(tiny_model_dir), ".", trust_remote_code=False)


def test_prompts_are_exactly_their_length_after_a_round_trip(tok):
    raw = tok._tok  # the Hugging Face tokenizer: what a server encodes the text with
    naive_off = 0
    for seed in range(100):
        for n in (1, 7, 128, 500):
            ids = tok.sample_ids(random.Random(seed), n)
            assert len(ids) == n
            assert raw.encode(tok.decode(ids), add_special_tokens=False) == ids
        # what random ids did before: their text re-tokenizes to another count
        plain = random.Random(seed).choices(tok._ordinary, k=128)
        naive_off += len(raw.encode(tok.decode(plain), add_special_tokens=False)) != 128
    assert naive_off > 50  # the class of defect is real with this tokenizer


def test_a_shared_prefix_is_the_same_tokens_in_every_prompt(tok):
    prefix = tok.sample_ids(random.Random(1), 64)
    for seed in range(50):
        ids = tok.sample_ids(random.Random(seed), 100, keep=prefix)
        again = tok._tok.encode(tok.decode(ids), add_special_tokens=False)
        assert again == ids and again[:64] == prefix


def test_no_prompt_text_spells_a_special_token(tok):
    special = set(tok._tok.all_special_ids)
    for seed in range(100):
        ids = tok.sample_ids(random.Random(seed), 64)
        assert not special & set(tok._tok.encode(tok.decode(ids), add_special_tokens=False))
