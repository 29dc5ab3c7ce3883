"""The names vLLM, SGLang and TGI give their Prometheus metrics, mapped to common ones, and a
``/metrics`` page read into them.

The names are those the servers expose today (vLLM V1, read off a running vLLM 0.32; SGLang
and TGI from their documentation), each followed by older names kept as fallbacks: gauges,
histograms (``_sum`` and ``_count`` read), counters, and ratios of counters (or the server's
own gauge of the ratio).
"""

from __future__ import annotations

import math
import re
from typing import BinaryIO

# common name -> the names servers use for it (gauges; over label sets as parse() says), newest first
GAUGES: dict[str, tuple[str, ...]] = {
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
    ),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    # a fraction of the KV cache in use, 0..1 (vLLM's "perc" is a fraction too)
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
}
# common name -> (numerator, denominator) counters; a gauge of the same common name is the
# fallback of servers that publish the ratio itself (vLLM before V1, SGLang)
RATIOS: dict[str, tuple[tuple[str, str], ...]] = {
    "prefix_cache_hit_rate": (
        ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
        ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    # speculative decoding: draft tokens accepted / proposed, and tokens a verification step
    # yields (the accepted drafts and the target model's own token: vLLM's 1 + accepted/drafts)
    "spec_acceptance_rate": (
        ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"),
    ),
    "spec_accept_length": (
        ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"),
    ),
}
RATIO_OFFSETS = {"spec_accept_length": 1.0}  # added to a ratio of counters (not to a gauge)
RATIO_GAUGES: dict[str, tuple[str, ...]] = {
    "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
    "spec_acceptance_rate": ("sglang:spec_accept_rate",),
    "spec_accept_length": ("sglang:spec_accept_length",),
}
# common name -> histogram base names (``_sum``/``_count`` are read), in seconds
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_s": (
        "vllm:inter_token_latency_seconds",
        "sglang:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",  # vLLM before 0.11: the ITL under TPOT's name
    ),
    "tpot_s": (
        "vllm:request_time_per_output_token_seconds",
        "sglang:time_per_output_token_seconds",
        "tgi_request_mean_time_per_token_duration",
    ),
    "e2e_s": (
        "vllm:e2e_request_latency_seconds",
        "sglang:e2e_request_latency_seconds",
        "tgi_request_duration",
    ),
    "queue_s": (
        "vllm:request_queue_time_seconds",
        "sglang:queue_time_seconds",
        "tgi_request_queue_duration",
    ),
    "prefill_s": ("vllm:request_prefill_time_seconds",),
    "decode_s": ("vllm:request_decode_time_seconds",),
}
# common name -> counter names; the change over the run is reported
COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "requests_finished": ("vllm:request_success_total", "sglang:num_requests_total"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}
# what only a server running speculative decoding publishes
SPECULATIVE = (
    "spec_acceptance_rate",
    "spec_accept_length",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)
UNITS = {
    "requests_running": "requests",
    "requests_waiting": "requests",
    "kv_cache_usage": "fraction of the KV cache (0-1)",
    "prefix_cache_hit_rate": "fraction of prompt tokens found in the cache (0-1)",
    "spec_acceptance_rate": "fraction of draft tokens accepted (0-1)",
    "spec_accept_length": "tokens a verification step yields (accepted drafts + 1)",
    "spec_drafts": "speculation steps",
    "spec_draft_tokens": "tokens",
    "spec_accepted_tokens": "tokens",
    **{name: "seconds" for name in HISTOGRAMS},
    "prompt_tokens": "tokens",
    "generation_tokens": "tokens",
    "preemptions": "requests preempted",
    "requests_finished": "requests",
}
# the columns server.csv holds per sample: gauges, then per-interval ratios and means
CSV_COLUMNS = ["t_s", *GAUGES, *RATIOS, *(f"{h}_mean" for h in HISTOGRAMS)]
# the names a sample keeps: a line of any other metric is skipped unread (pages of tens of
# MB exist; read line by line, no single step holds the interpreter long enough to delay the
# dispatching loop)
_WANTED = tuple(
    {
        n.encode()
        for names in (
            *GAUGES.values(),
            *RATIO_GAUGES.values(),
            *HISTOGRAMS.values(),
            *COUNTERS.values(),
        )
        for n in names
    }
    | {n.encode() for pairs in RATIOS.values() for pair in pairs for n in pair}
)


# Fractions each engine publishes of its own (its KV cache, its hit rate): over the label sets
# of several engines (data parallel) their mean, the share of them all; a sum read 1.3 for two
# engines' caches 65% full. Counts and counters are summed.
MEAN_OVER_LABELS = frozenset(
    [*GAUGES["kv_cache_usage"], *(n for names in RATIO_GAUGES.values() for n in names)]
)


# A series labelled with what it belongs to is also kept as that one's own, under
# "<name>\x00<dimension>=<value>": its model (vLLM's and SGLang's model_name, a gateway's model),
# its engine (vLLM's engine, SGLang's dp_rank: data-parallel replicas), its adapter (lora_name).
SPLIT = "\x00"
DIMENSIONS = {
    "model": re.compile(r'[{,]\s*(?:model_name|model)="([^"]{1,200})"'),
    "engine": re.compile(r'[{,]\s*(?:engine|dp_rank)="([^"]{1,50})"'),
    "adapter": re.compile(r'[{,]\s*(?:lora_name|adapter)="([^"]{1,200})"'),
}


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{metric name: value}``, summed over label sets, or their
    mean for an engine's fraction (``MEAN_OVER_LABELS``), and each model's, engine's and
    adapter's own where the series name theirs (``DIMENSIONS``); a histogram's ``_bucket`` lines are left out: their sum
    over ``le`` means nothing."""
    out: dict[str, float] = {}
    sets: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        head, _, rest = line.partition(" ") if "{" not in line else _split_labels(line)
        fields = rest.split()
        if not head or not fields or head.endswith("_bucket"):
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            keys = [head]
            if "{" in line:  # each one's own series too (model, engine, adapter)
                for dim, label in DIMENSIONS.items():
                    found = label.search(line)
                    if found is not None:
                        keys.append(f"{head}{SPLIT}{dim}={found.group(1)}")
            for key in keys:
                out[key] = out.get(key, 0.0) + value
                sets[key] = sets.get(key, 0) + 1
    for key in out:
        if key.split(SPLIT, 1)[0] in MEAN_OVER_LABELS:
            out[key] /= sets[key]
    return out


def read_page(stream: BinaryIO, limit: int) -> tuple[dict[str, float], bool]:
    """The mapped metrics of a page read line by line from ``stream`` (up to ``limit`` bytes),
    and whether the page was longer: lines of other metrics are skipped without decoding."""
    kept: list[str] = []
    read = 0
    for raw in stream:
        read += len(raw)
        if read > limit:
            return parse("".join(kept)), True
        if raw.startswith(_WANTED):
            kept.append(raw.decode("utf-8", "replace"))
    return parse("".join(kept)), False


def _split_labels(line: str) -> tuple[str, str, str]:
    name, _, after = line.partition("{")
    _labels, _, rest = after.rpartition("}")
    return name, "", rest
