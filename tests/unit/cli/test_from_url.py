"""``loadtest run --url``: the scenario the flags make."""

from __future__ import annotations


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
