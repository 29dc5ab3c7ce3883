"""Scenario files as a run reads them: YAML to a frozen scenario, ``--set`` overrides applied
with their types, relative paths resolved beside the file, and every problem named with the
file, its line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.config.loading import load_scenario, resolve_path
from loadtest.core.errors import ScenarioError

TEXT = """\
name: t
backend: {kind: sim, max_concurrency: 2}
workload:
  input_tokens: 100
load:
  arrival: {kind: poisson, rate: 10}
  duration: 10s
"""


def write(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "s.yml"
    path.write_text(text)
    return path


def test_a_file_loads_with_its_overrides_typed(tmp_path):
    loaded = load_scenario(write(tmp_path), ["load.arrival.rate=2.5", "backend.max_concurrency=8"])
    s = loaded.scenario
    assert s.load.arrival.rate == 2.5 and s.backend.max_concurrency == 8
    assert s.load.duration == 10_000_000_000
    assert loaded.base_dir == tmp_path


def test_a_bad_field_is_named_with_its_file_and_line(tmp_path):
    path = write(tmp_path, TEXT.replace("duration: 10s", "duration: soon"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    (problem,) = err.value.problems
    assert problem.startswith(f"{path}:7:") and "load.duration" in problem


def test_a_bad_override_is_named_as_the_override(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path), ["load.arrival.rate=fast"])
    assert any("--set" in p and "load.arrival.rate" in p for p in err.value.problems)


def test_an_unknown_field_is_an_error_not_ignored(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, TEXT + "  warmpu: 5s\n"))
    assert any("warmpu" in p for p in err.value.problems)


def test_relative_paths_resolve_beside_the_scenario_file(tmp_path):
    loaded = load_scenario(write(tmp_path))
    assert resolve_path(loaded, "data/prompts.jsonl") == tmp_path / "data" / "prompts.jsonl"
