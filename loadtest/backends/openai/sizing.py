"""How a served model's prompts are sized: in the model's own tokens where its tokenizer is
here (the server's additions, a chat template's, counted in), else in bytes scaled by the
server's own ``/tokenize`` (vLLM, SGLang), else in bytes of text; and the notice that says so
before the run."""

from __future__ import annotations

import random
from typing import Any

from loadtest.backends.openai import connection
from loadtest.backends.openai.bodies import TEMPLATED_APIS
from loadtest.backends.openai.discovery import server_root
from loadtest.backends.openai.tokens import prompt_overhead
from loadtest.config.backend_specs import OpenAISpec
from loadtest.transport.pool import ConnectionPool
from loadtest.workload.tokenizer import ByteTokenizer, ScaledByteTokenizer

TOKENIZE_SAMPLE_BYTES = 4096  # text whose server token count sets bytes per token

# Bytes a token the server's /tokenize may give for text and still be used: every tokenizer in
# use makes between about 1 and 6 bytes of text a token (random characters fewer, prose more).
MIN_BYTES_PER_TOKEN, MAX_BYTES_PER_TOKEN = 0.5, 16.0


async def prompt_sizing(
    spec: OpenAISpec, tokenizer: Any, counts_tokens: bool, pool: ConnectionPool, base: str
) -> tuple[Any, str]:
    """How prompts are sized, and the tokenizer that sizes them: the model's (the server's
    additions counted in), else bytes scaled by the server's ``/tokenize``, else bytes."""
    if counts_tokens:
        templated = spec.api in TEMPLATED_APIS
        tokenizer.prompt_overhead = prompt_overhead(tokenizer, templated)
        return tokenizer, (
            f"the model's tokenizer: each prompt is input_tokens as the server counts it, "
            f"{tokenizer.prompt_overhead} of them added by the server "
            + ("(the chat template)" if templated else "(special tokens)")
        )
    per_token = await server_bytes_per_token(pool, base, spec.model)
    if per_token is not None and not all(
        MIN_BYTES_PER_TOKEN <= b <= MAX_BYTES_PER_TOKEN for b in per_token
    ):
        # a broken or hostile /tokenize would make every prompt thousands of times longer
        # (or empty): its counts are not used
        implausible = ", ".join(f"{b:.3g}" for b in per_token)
        return tokenizer, (
            "bytes of text: no tokenizer for the model here (one 'token' = one byte); the "
            f"server's /tokenize gave {implausible} bytes a token, outside "
            f"{MIN_BYTES_PER_TOKEN:g}..{MAX_BYTES_PER_TOKEN:g}, and was not used"
        )
    if per_token is None:
        return (
            tokenizer,
            "bytes of text: no tokenizer for the model here (one 'token' = one byte)",
        )
    return ScaledByteTokenizer(*per_token), (
        f"bytes scaled by the server's /tokenize: {per_token[1]:.3g} bytes a token of "
        f"natural text, {per_token[0]:.3g} of random characters (synthetic lengths "
        "approximate; input counts are the server's)"
    )


def no_tokenizer_notice(model: str, tokenizer: Any) -> str:
    """Said before the run where prompts are not sized in the model's own tokens."""
    how = (
        f"prompts are sized with the server's /tokenize ({tokenizer.natural_bytes_per_token:.3g} "
        "bytes a token of natural text, approximately)"
        if isinstance(tokenizer, ScaledByteTokenizer)
        else "prompts are sized in bytes of text (a 256-token prompt is 256 bytes)"
    )
    import importlib.util

    reader = (
        ""
        if importlib.util.find_spec("transformers") is not None
        else " (and install a tokenizer reader, without torch: pip install 'llm-loadtest[tokenizer]')"
    )
    return (
        f"no tokenizer for {model!r} on this machine or the hub: {how}, and output "
        "is counted a token per chunk, reconciled to the server's usage; set "
        "backend.tokenizer to a local folder or a hub id to size prompts in the model's "
        f"own tokens{reader}"
    )


async def server_bytes_per_token(
    pool: ConnectionPool, base: str, model: str
) -> tuple[float, float] | None:
    """Bytes a token of each kind of text synthetic prompts are (random characters, a
    passage of the corpus), by the server's own ``/tokenize`` (vLLM, SGLang), or None where
    it has none."""
    out = []
    for natural in (False, True):
        sample = ByteTokenizer().sample_ids(
            random.Random(0), TOKENIZE_SAMPLE_BYTES, natural=natural
        )
        text = bytes(sample).decode("ascii")
        count = await connection.server_token_count(pool, server_root(base), model, text)
        if not count:
            return None
        out.append(len(text) / count)
    return out[0], out[1]
