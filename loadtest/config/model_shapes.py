"""Real architectures by name, for ``model: dummy:<name>``: random weights, exact shapes.

Decode speed depends on shapes, not on trained values, so a dummy model measures the same
speed as the real one without a download (what vLLM calls dummy weights). Pure data: no imports.
"""

from __future__ import annotations

_LLAMA3 = dict(
    model_type="llama",
    vocab_size=128256,
    rope_theta=500000.0,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    bos_token_id=128000,
    eos_token_id=128001,
)
_QWEN25 = dict(
    model_type="qwen2",
    rope_theta=1000000.0,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=151643,
    eos_token_id=151643,
)

# Encoders (api: embeddings): one forward pass a batch, a pooled vector a text.
ENCODER_TYPES = ("bert", "roberta", "xlm-roberta", "modernbert", "distilbert")

DUMMY_ARCHITECTURES: dict[str, dict] = {
    # CPU-sized encoder: for tests (byte-level vocabulary, as tiny-llama).
    "tiny-bert": dict(
        model_type="bert",
        vocab_size=258,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        pad_token_id=0,
    ),
    # BERT-base's shape (bge-base-en, e5-base and most base-size embedding models share it).
    "bert-base": dict(
        model_type="bert",
        vocab_size=30522,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=512,
        pad_token_id=0,
    ),
    # BERT-large's (bge-large-en, e5-large).
    "bert-large": dict(
        model_type="bert",
        vocab_size=30522,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        max_position_embeddings=512,
        pad_token_id=0,
    ),
    # CPU-sized: for tests and the out-of-the-box scenario (byte-level vocabulary).
    "tiny-llama": dict(
        model_type="llama",
        vocab_size=258,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=256,
        eos_token_id=257,
        tie_word_embeddings=True,
    ),
    "llama-3.2-1b": dict(
        _LLAMA3,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "llama-3.1-8b": dict(
        _LLAMA3,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    # Does not fit one 80 GB GPU in bf16 (141 GB of weights): for tensor parallelism.
    "llama-3.1-70b": dict(
        _LLAMA3,
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    "qwen2.5-0.5b": dict(
        _QWEN25,
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        _QWEN25,
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    ),
    "mistral-7b": dict(
        model_type="mistral",
        vocab_size=32768,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        sliding_window=None,
    ),
}
