"""``loadtest run --url``: the scenario the flags make."""

from __future__ import annotations

import pytest


def test_a_repeated_url_makes_the_others_endpoints_of_the_first(tmp_path, monkeypatch):
    """``--url A --url B``: A is base_url, B an endpoint of the same model, in the saved
    scenario as in the run; each URL is checked before anything is asked of it."""
    import sys

    import pytest
    import typer
    import yaml

    from loadtest.cli.from_url import scenario_source

    monkeypatch.setattr(sys, "argv", ["loadtest", "run"])
    saved = tmp_path / "s.yml"
    path, keep = scenario_source(
        None, [], ["http://a:8000/v1", "unix:///run/b.sock:/v1"], "m", {}, saved, False
    )
    backend = yaml.safe_load(saved.read_text())["backend"]
    assert (backend["base_url"], backend["endpoints"]) == (
        "http://a:8000/v1",
        ["unix:///run/b.sock:/v1"],
    )
    assert path == saved and keep == []
    with pytest.raises(typer.Exit):
        scenario_source(None, [], ["http://a:8000/v1", "ftp://b/v1"], "m", {}, None, False)


def test_files_named_with_set_are_the_ones_here_not_beside_the_written_scenario(
    tmp_path, monkeypatch
):
    import sys

    import yaml

    from loadtest.cli.from_url import scenario_source

    here = tmp_path / "here"
    (here / "certs").mkdir(parents=True)
    (here / "certs" / "ca.pem").write_text("x")
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "argv", ["loadtest", "run"])
    saved = tmp_path / "elsewhere" / "s.yml"
    saved.parent.mkdir()
    sets = ["backend.ca_bundle=certs/ca.pem", "backend.tokenizer=org/model-on-the-hub"]
    scenario_source(None, sets, ["https://a/v1"], "m", {}, saved, False)
    backend = yaml.safe_load(saved.read_text())["backend"]
    assert backend["ca_bundle"] == str(here / "certs" / "ca.pem")
    assert backend["tokenizer"] == "org/model-on-the-hub"  # names nothing here: left as given


def test_a_pasted_endpoint_is_cut_to_its_api_base_without_a_request():
    from loadtest.backends.openai.discovery import api_base

    assert api_base("http://h:8000/v1/chat/completions") == ("http://h:8000/v1", "chat")
    assert api_base("https://h/openai/v1/embeddings/") == ("https://h/openai/v1", "embeddings")
    assert api_base("http://h:8000/v1/models") == ("http://h:8000/v1", None)
    assert api_base("http://h:8000/v1") == ("http://h:8000/v1", None)  # a base: as typed
    assert api_base("unix:///run/v.sock:/v1") == ("unix:///run/v.sock:/v1", None)


@pytest.mark.integration  # a server and the CLI as processes
def test_a_root_with_no_api_says_what_to_give(tmp_path):
    """A server that answers 404 at its root and under /v1: exit 4, naming the /v1 form."""
    import subprocess
    import sys

    from tests.real_servers import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import time

        from loadtest.backends.openai.discovery import api_base
        from loadtest.core.errors import BackendError

        for _ in range(100):  # until it listens
            try:
                api_base(f"http://127.0.0.1:{port}")
            except BackendError as exc:
                if "HTTP 404" in str(exc):
                    said = str(exc)
                    break
            time.sleep(0.05)
        assert f"give the API's base URL, as http://127.0.0.1:{port}/v1" in said
        r = subprocess.run(
            [sys.executable, "-m", "loadtest", "run", "--url", f"http://127.0.0.1:{port}",
             "-o", str(tmp_path / "r"), "-q"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 4 and "nor under /v1" in r.stderr, r.stderr
    finally:
        server.kill()
        server.wait()
