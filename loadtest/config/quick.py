"""A scenario from command-line flags: ``loadtest run --url http://host:8000/v1`` with no file.

The flags map onto the same scenario model a file would hold, and the YAML written out is that
scenario exactly (``--save-scenario``): a first try becomes a reproducible scenario file.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import yaml

from loadtest.core.errors import ScenarioError
from loadtest.core.json_types import JsonObject, JsonValue

DEFAULT_INPUT_TOKENS = 256
DEFAULT_OUTPUT_TOKENS = 128
DEFAULT_DURATION = "60s"
DEFAULT_WARMUP = "5s"


def scenario_from_flags(
    *,
    url: str,
    model: str,
    api: str | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    duration: str | None = None,
    requests: int | None = None,
    input_tokens: str | None = None,
    output_tokens: str | None = None,
    dataset: str | None = None,
    warmup: str | None = None,
) -> JsonObject:
    """The scenario mapping the flags describe. Open loop (Poisson at ``rate``; ``inf``: every
    request at once, a burst of ``requests``), with ``concurrency`` its cap on requests in
    flight where both are given; or closed loop (``concurrency`` users, one by default); a
    window of ``duration`` (60 s by default, after 5 s of warm-up) or ``requests``
    (no warm-up, as vLLM's and AIPerf's request counts). ``warmup``: a duration or a request
    count, 0 for none. Synthetic prompts go through the completions API (a chat template would
    add tokens the plan did not count); a dataset of conversations through chat."""
    if duration is not None and requests is not None:
        raise ScenarioError(["give --duration or --requests, not both"])
    burst = rate is not None and rate == float("inf")
    if burst and requests is None:
        raise ScenarioError(["--rate inf sends every request at once: give --requests N"])
    arrival: JsonObject = (
        {"kind": "burst"}
        if burst
        else {"kind": "poisson", "rate": rate}
        if rate is not None
        else {"kind": "concurrency", "users": concurrency or 1}
    )
    load: JsonObject = {"arrival": arrival}
    if rate is not None and concurrency is not None:  # vLLM's --max-concurrency with a rate
        load["max_in_flight"] = concurrency
    if requests is not None:
        load["requests"] = requests
    else:
        load["duration"] = duration or DEFAULT_DURATION
        load["warmup"] = DEFAULT_WARMUP
    _warmup(load, warmup, by_count=burst or requests is not None)
    workload: JsonObject = {
        "output_tokens": _length(output_tokens, DEFAULT_OUTPUT_TOKENS, "--output-tokens")
    }
    if dataset is not None:
        # the scenario is written elsewhere (a temp folder, --save-scenario): a local file is
        # named absolutely, so it is the one meant here
        local = not dataset.startswith("hf:")
        workload["dataset"] = str(Path(dataset).expanduser().absolute()) if local else dataset
    else:
        workload["input_tokens"] = _length(input_tokens, DEFAULT_INPUT_TOKENS, "--input-tokens")
    host = urlsplit(url).hostname or "server"
    return {
        "name": f"{host}-{model.rsplit('/', 1)[-1]}",
        "backend": {
            "kind": "openai",
            "base_url": url,
            "model": model,
            "api": api or ("chat" if dataset is not None else "completions"),
        },
        "workload": workload,
        "load": load,
    }


def _warmup(load: JsonObject, text: str | None, by_count: bool) -> None:
    """``--warmup`` into ``load``: a request count (``10``) or a duration (``5s``); 0 for none.
    A burst or a request-count window warms up by count only."""
    if text is None:
        return
    value = text.strip()
    if value.isdigit():
        load.pop("warmup", None)
        if int(value):
            load["warmup_requests"] = int(value)
        return
    if by_count:
        raise ScenarioError([f"--warmup {text!r}: with --requests, a request count (10, or 0)"])
    load["warmup"] = value


def _length(text: str | None, default: int, flag: str) -> JsonValue:
    """``256`` or a distribution in YAML flow style (``{dist: lognormal, mean: 256, sigma: 0.4}``)."""
    if text is None:
        return default
    try:
        value: JsonValue = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{flag} {text!r}: {exc}"]) from None
    if not isinstance(value, (int, dict)) or isinstance(value, bool):
        raise ScenarioError(
            [
                f"{flag} {text!r}: a token count, or a distribution such as {{dist: uniform, min: 32, max: 96}}"
            ]
        )
    return value


def to_yaml(scenario: JsonObject, command: str) -> str:
    """The scenario as a file, headed by the command that made it."""
    return f"# Written by: {command}\n" + yaml.safe_dump(scenario, sort_keys=False)
