"""A tiny Llama and a BPE tokenizer trained here, saved with save_pretrained: a real model
directory for the real loading paths (in-process and ``transformers serve``), built in seconds."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "load testing measures latency from the plan",
    "tokens per second and time to first token",
    "hello world, hello tokenizer",
] * 50


def build_tiny_model(
    out: Path,
    hidden_size: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    max_positions: int = 512,
    ascii_alphabet: bool = False,
    think_tokens: bool = False,
) -> Path:
    """A 2-layer Llama of ``hidden_size`` with ``heads`` attention heads (head size
    ``hidden_size // heads``: vLLM's CPU attention takes 32 and up) and its tokenizer
    (``ascii_alphabet``: with a token for every printable ASCII character, so it can write JSON;
    no token is part of a character, so every token's text streams on its own; ``think_tokens``:
    with ``<think>`` and ``</think>``, the tokens a reasoning parser splits an answer at)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # ByteLevel's names for printable ASCII: the characters themselves, space as "Ġ", "\n" "Ċ"
    alphabet = [chr(c) for c in range(33, 127)] + ["Ġ", "Ċ"] if ascii_alphabet else []
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=320 + len(alphabet),
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=alphabet,
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    if think_tokens:
        fast.add_tokens(["<think>", "</think>"])
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def build_tiny_encoder(out: Path, cross_encoder: bool = False, hidden_size: int = 64) -> Path:
    """A 2-layer BERT and a WordPiece tokenizer trained here: an embedding model (``BertModel``),
    or with ``cross_encoder`` a one-label sequence classifier (a reranker's shape)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        PreTrainedTokenizerFast,
    )

    out.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # "##" pieces join the word before, as BERT's do
    tok.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials)
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=512,
        num_labels=1,
    )
    (BertForSequenceClassification if cross_encoder else BertModel)(config).save_pretrained(out)
    return out
