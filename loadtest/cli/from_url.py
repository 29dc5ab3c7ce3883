"""``loadtest run --url``: a served model run from flags, with no scenario file. The flags
become a scenario (saved with ``--save-scenario``, so a first try is reproducible); URL
credentials never reach a file."""

from __future__ import annotations

from pathlib import Path

import typer

from loadtest.cli.common import error, usage_error
from loadtest.core import exit_codes


def scenario_source(
    scenario: Path | None,
    overrides: list[str],
    urls: list[str] | None,
    model: str | None,
    flags: dict,
    save_to: Path | None,
    overwrite: bool,
) -> tuple[Path, list[str]]:
    """The scenario file to load and the overrides on it. With ``--url`` and no file, the
    scenario the flags describe, written to ``--save-scenario`` (or a temporary file)."""
    import json

    given = {k: v for k, v in flags.items() if v is not None}
    url, more = (urls[0], list(urls[1:])) if urls else (None, [])
    # the other endpoints of one model, as an override (their order kept)
    endpoints = [f"backend.endpoints={json.dumps(more)}"] if more else []
    if scenario is not None:
        if given or save_to is not None:
            named = ", ".join("--" + k.replace("_", "-") for k in given) or "--save-scenario"
            usage_error(f"{named}: only without a scenario file")
        extra = [f"backend.base_url={url}", *endpoints] if url else []
        extra += [f"backend.model={model}"] if model else []
        return scenario, extra + overrides
    if url is None:
        usage_error("give a scenario file, or --url for a served model (loadtest run --help)")
    from loadtest.config.backend_specs import url_problem

    for each in urls or []:
        if problem := url_problem(each):  # before any request: no other scheme is ever opened
            usage_error(f"--url {problem}")
    url, named_api = _api_base(url, given, overrides)
    if named_api in ("chat", "completions", "embeddings", "responses", "rerank"):
        given.setdefault("api", named_api)  # the endpoint pasted whole named its API
    overrides = endpoints + overrides
    data = _flags_scenario(url, model or _first_model(url, given, overrides), given, overrides)
    return _written(data, url, save_to, overwrite)


def _api_base(url: str, given: dict, overrides: list[str]) -> tuple[str, str | None]:
    """``discovery.api_base`` of ``url``, asked the way the run will ask; said on stderr where
    it differs from what was typed; exit 4 when the server answers neither way."""
    from loadtest.backends.openai.connection import client_settings
    from loadtest.backends.openai.discovery import api_base
    from loadtest.config.backend_specs import OpenAISpec
    from loadtest.core import secrets
    from loadtest.core.errors import BackendError

    backend = _flags_scenario(url, "?", given, overrides)["backend"]
    try:
        settings = client_settings(OpenAISpec.model_validate(backend), Path.cwd())
        base, api = api_base(url, settings=settings)
    except (ValueError, BackendError) as exc:
        error(f"--url {secrets.redact_url(url)}: {exc}")
        raise typer.Exit(exit_codes.FAILED) from None
    if base != url:
        typer.echo(
            f"API: {secrets.redact_url(base)} (from --url {secrets.redact_url(url)})", err=True
        )
    return base, api


def _first_model(url: str, given: dict, overrides: list[str]) -> str:
    """The first model the server lists (said on stderr), asked the way the run will ask (the
    flags' and --set's TLS, proxy, headers and API key); exit 4 when it cannot be asked."""
    from loadtest.backends.openai.connection import client_settings
    from loadtest.backends.openai.discovery import list_models
    from loadtest.config.backend_specs import OpenAISpec
    from loadtest.core.errors import BackendError

    backend = _flags_scenario(url, "?", given, overrides)["backend"]  # "?": not asked yet
    try:
        settings = client_settings(OpenAISpec.model_validate(backend), Path.cwd())
        models = list_models(url, settings=settings)
    except (ValueError, BackendError) as exc:  # ValueError: a CA file that is none, say
        error(f"--url: {exc}")
        raise typer.Exit(exit_codes.FAILED) from None
    typer.echo(
        f"model: {models[0]}"
        + (f" (the first of {len(models)} the server lists)" if len(models) > 1 else ""),
        err=True,
    )
    return models[0]


def _flags_scenario(url: str, model: str, given: dict, overrides: list[str]) -> dict:
    """The scenario the flags describe, with the overrides applied (a bad --set named as such)."""
    from loadtest.config import quick
    from loadtest.config.loading import apply_overrides, parse_scenario
    from loadtest.core.errors import ScenarioError

    try:
        data = quick.scenario_from_flags(url=url, model=model, **given)
        # the saved file holds what runs, overrides included: `loadtest run FILE` repeats it
        # (the run itself loads the flags' scenario with the overrides on top, so that a bad
        # --set is named as such)
        parse_scenario(quick.to_yaml(data, ""), Path("--url"), overrides)
        apply_overrides(data, overrides, Path("--set"))
    except ScenarioError as exc:
        usage_error(*exc.problems)
    _paths_from_here(data)
    return data


# files a --set may name: relative to where the command runs, as the user meant them, never to
# the folder the scenario is written to (a temporary one, or --save-scenario's)
PATH_FIELDS = (
    ("backend", "ca_bundle"),
    ("backend", "client_cert"),
    ("backend", "client_key"),
    ("backend", "tokenizer"),
    ("workload", "dataset"),
)


def _paths_from_here(data: dict) -> None:
    """Each relative path of ``PATH_FIELDS`` that names a file or folder here, made absolute
    (a hub id or a URL, which names nothing here, is left as it is)."""
    for section, key in PATH_FIELDS:
        value = (data.get(section) or {}).get(key)
        if isinstance(value, str) and value and "://" not in value:
            path = Path(value).expanduser()
            if not path.is_absolute() and path.exists():
                data[section][key] = str(path.absolute())


def _written(data: dict, url: str, save_to: Path | None, overwrite: bool) -> tuple[Path, list[str]]:
    """The scenario written where it is asked for (or a temporary file), and the overrides that
    carry its secrets (the URL's and the proxy's credentials, sensitive header and body
    values): they are never
    written (the file, the run's copy, a temp file), the file holds them masked, and they reach
    the run as overrides held in memory."""
    import json
    import shlex
    import sys
    import tempfile

    from loadtest.config import quick
    from loadtest.core import atomic, secrets

    secret_url = secrets.redact_url(url) != url
    backend = data["backend"]
    backend["base_url"] = secrets.redact_url(url)
    keep = [f"backend.base_url={url}"] if secret_url else []
    secrets.register(*secrets.url_credentials(url))  # the command line below is scrubbed
    proxy = backend.get("proxy")
    if isinstance(proxy, str) and secrets.redact_url(proxy) != proxy:  # the proxy's own login
        secrets.register(*secrets.url_credentials(proxy))
        backend["proxy"] = secrets.redact_url(proxy)
        keep.append(f"backend.proxy={proxy}")
    endpoints = backend.get("endpoints") or []
    if any(secrets.redact_url(u) != u for u in endpoints):  # other endpoints' own logins
        secrets.register(*(v for u in endpoints for v in secrets.url_credentials(u)))
        backend["endpoints"] = [secrets.redact_url(u) for u in endpoints]
        keep.append(f"backend.endpoints={json.dumps(endpoints)}")
    # Secret header and body values (given with --set) are held back the same way: written as
    # ***, which a later run of the file refuses until they are given again
    masked = []
    for field in ("headers", "extra_body"):
        given = backend.get(field) or {}
        if values := secrets.sensitive_values(given):
            secrets.register(*values)
            backend[field] = secrets.redact_mapping(given)
            masked.append(f"backend.{field}={json.dumps(given)}")  # JSON: YAML, exactly
    keep += masked
    command = "loadtest " + shlex.join(sys.argv[1:])
    if masked:
        command += f"\n# Values written as {secrets.MASK} are secrets: give them again with --set"
    text = quick.to_yaml(data, command)
    if save_to is not None:
        if save_to.exists() and not overwrite:
            usage_error(f"--save-scenario {save_to}: exists (--overwrite to replace it)")
        atomic.write_text(save_to, text)
        typer.echo(f"scenario: {save_to}", err=True)
        return save_to, keep
    path = Path(tempfile.mkdtemp(prefix="loadtest-")) / "scenario.yml"
    atomic.write_text(path, text)
    return path, keep
