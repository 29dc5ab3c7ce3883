"""Bad input from outside is a clear error naming the file and line (exit 2), never a traceback:
binary files, JSON nested past any sane depth, NaN and 1e400 in a trace, durations that would
overflow, malformed values for a sweep, URLs that are not http(s); and a Hugging Face dataset
saved to disk goes through the CLI as the README says."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.core import exit_codes
from tests.conftest import write_scenario

SIM = {
    "name": "inputs",
    "backend": {"kind": "sim"},
    "workload": {"output_tokens": 4},
    "load": {"arrival": {"kind": "constant", "rate": 50}, "requests": 10},
    "telemetry": {"gpu": False},
}


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("bin.jsonl", b"\x89PNG\x00\x01\xff\xfe", "bin.jsonl:1: not UTF-8 text at byte 0"),
        ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000, "deep.jsonl:1: JSON nested too deeply"),
        (
            "nan.jsonl",
            b'{"prompt": "a"}\n{"prompt": NaN}\n',
            "nan.jsonl:2: NaN is not a JSON number",
        ),
    ],
)
def test_a_hostile_dataset_is_a_clear_error(tmp_path, name, content, says):
    (tmp_path / name).write_bytes(content)
    path = write_scenario(tmp_path, {**SIM, "workload": {"output_tokens": 4, "dataset": name}})
    r = cli("validate", path)
    assert r.exit_code == exit_codes.USAGE and says in r.output, r.output


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"0\nNaN\n", "trace.txt:2: offset"),
        (b"0\n1e400\n", "trace.txt:2: offset"),
        (b"0\n\xff\xfe\x00\n", "trace.txt:2: not UTF-8 text"),
    ],
)
def test_a_hostile_trace_is_a_clear_error(tmp_path, content, says):
    (tmp_path / "trace.txt").write_bytes(content)
    data = {**SIM, "load": {"arrival": {"kind": "trace", "file": "trace.txt"}, "requests": 2}}
    r = cli("validate", write_scenario(tmp_path, data))
    assert r.exit_code == exit_codes.USAGE and says in r.output, r.output


def test_numbers_past_any_range_are_refused_by_field(tmp_path):
    path = write_scenario(tmp_path, SIM)
    r = cli("validate", path, "--set", "load.duration=1.0e+308")
    assert (
        r.exit_code == exit_codes.USAGE
        and "load.duration: duration 1e+308 is over a year" in r.output
    )
    r = cli("validate", path, "--set", "outputs.interval=1ns")
    assert r.exit_code == exit_codes.USAGE and "10ms at least" in r.output
    r = cli("sweep", path, "--param", "load.arrival.rate=[1,2", "-o", tmp_path / "sw")
    assert r.exit_code == exit_codes.USAGE and "not a list of values" in r.output
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1/v1", "not a URL (Invalid IPv6 URL)"),
        ("localhost:8000/v1", "give an http://, https:// or unix:// URL"),
        ("file:///etc/passwd", "give an http://, https:// or unix:// URL"),
        ("ftp://host/v1", "give an http://, https:// or unix:// URL"),
    ],
)
def test_a_url_that_is_not_http_is_refused_before_anything_is_opened(tmp_path, url, says):
    r = cli("run", "--url", url, "-q", "-o", tmp_path / "run")
    assert r.exit_code == exit_codes.USAGE and says in r.output, r.output
    assert not (tmp_path / "run").exists()


def test_a_nested_result_given_back_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    for command in (["report", run], ["compare", run, run]):
        r = cli(*command)
        assert r.exit_code == exit_codes.USAGE and "nested too deeply" in r.output, r.output


def test_a_hugging_face_dataset_saved_to_disk_runs_through_the_cli(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict(
        {"prompt": ["hello there", "general kenobi", "a third"]}
    ).save_to_disk(str(tmp_path / "ds"))
    path = write_scenario(tmp_path, {**SIM, "workload": {"output_tokens": 4, "dataset": "hf:ds"}})
    assert cli("validate", path).exit_code == 0
    r = cli("run", path, "-q", "-o", tmp_path / "run", "--no-report")
    assert r.exit_code == 0, r.output
    import json

    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["requests"]["completed"] == 10


def test_escape_sequences_in_outside_text_are_shown_never_obeyed(tmp_path):
    """A clipboard-write sequence in a scenario's name (as in a server's model id or error
    body): the terminal, stderr and report.md show it written out, never the raw bytes."""
    import subprocess
    import sys

    evil = "evil\x1b]52;c;aGVsbG8=\x07name\x9b31m"
    path = write_scenario(
        tmp_path, {**SIM, "name": evil, "workload": {"input_tokens": 4, "output_tokens": 2}}
    )
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(tmp_path / "run")],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "run" / "report.md").read_bytes()
    for shown in (r.stdout, r.stderr, report):
        assert b"\x1b" not in shown and b"\x07" not in shown and "\x9b".encode() not in shown
    assert b"evil\\x1b]52;c;aGVsbG8=\\x07name" in report


def test_more_workers_than_cores_is_refused_before_anything_starts(tmp_path):
    import os

    data = {**SIM, "backend": {"kind": "noop"}, "workload": {"input_tokens": 4, "output_tokens": 2}}
    path = write_scenario(tmp_path, data)
    r = cli("run", path, "--workers", (os.cpu_count() or 1) + 1, "-q", "-o", tmp_path / "run")
    assert r.exit_code == exit_codes.USAGE and "load.workers:" in r.output
    assert "cores" in r.output and not (tmp_path / "run").exists()


def test_a_combination_problem_names_the_set_that_made_it(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"prompt": "a"}\n')
    data = {**SIM, "workload": {"input_tokens": 4, "output_tokens": 2}}
    r = cli("validate", write_scenario(tmp_path, data), "--set", "workload.dataset=p.jsonl")
    assert r.exit_code == exit_codes.USAGE
    assert "(with --set workload.dataset=p.jsonl): workload: give either" in r.output


def test_a_relative_dataset_with_url_is_the_one_here(tmp_path, monkeypatch):
    """``--url ... --dataset rel/path`` names the file where the command runs, not beside the
    temporary scenario the flags make (it was looked for in a temp dir)."""
    from loadtest.config import quick

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "a"}\n')
    data = quick.scenario_from_flags(url="http://127.0.0.1:1/v1", model="m", dataset="data/p.jsonl")
    assert data["workload"]["dataset"] == str(tmp_path / "data" / "p.jsonl")
    hub = quick.scenario_from_flags(url="http://127.0.0.1:1/v1", model="m", dataset="hf:org/name")
    assert hub["workload"]["dataset"] == "hf:org/name"


def test_a_dataset_past_its_row_limit_is_read_in_part_and_says_so(tmp_path):
    import json

    (tmp_path / "many.jsonl").write_text("".join(f'{{"prompt": "p{i}"}}\n' for i in range(50)))
    data = {
        **SIM,
        "workload": {"output_tokens": 2, "dataset": "many.jsonl", "dataset_max_rows": 20},
    }
    r = cli("run", write_scenario(tmp_path, data), "-q", "-o", tmp_path / "run", "--no-report")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["backend"]["dataset_rows"] == 20 and m["backend"]["dataset_rows_cut"] == 30
    assert any(
        w.startswith("the dataset held 30 rows past workload.dataset_max_rows")
        for w in m["validity"]["warnings"]
    )
