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
