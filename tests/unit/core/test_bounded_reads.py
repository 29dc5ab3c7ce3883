"""Every file loadtest reads goes through one bounded reader: a regular file only (a FIFO
would hold the open for ever, /dev/zero the read), under a byte cap, and a result's histograms
checked before they inflate; each refusal names the file, and the commands exit 2."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from loadtest.analysis.gate import load_sla
from loadtest.config.loading import load_scenario
from loadtest.core import outside
from loadtest.core.errors import ScenarioError
from loadtest.core.histogram import LatencyHistogram, check_encoded
from loadtest.results.model.reading import ResultReadError, read_run

ROOT = Path(__file__).resolve().parents[3]


def not_regular(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a plain open would wait for one for ever
    elif kind == "device":
        path.symlink_to("/dev/zero")  # a plain read would never end
    else:
        path.mkdir()
    return path


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_no_reader_takes_anything_but_a_regular_file(tmp_path, kind):
    path = not_regular(tmp_path, kind)
    with pytest.raises(outside.OutsideTextError, match="not a regular file"):
        outside.read_text(path)
    with pytest.raises(ResultReadError, match=str(path)):
        read_run(path)
    for reader in (load_sla, load_scenario):
        with pytest.raises(ScenarioError) as refused:
            reader(path)
        assert str(path) in str(refused.value)
    with pytest.raises(ScenarioError, match="not a regular file"):
        outside.read_input(path, "dataset")


def test_a_file_over_its_cap_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(outside.OutsideTextError, match="larger than"):
        outside.read_text(big, limit=1024)


def bomb() -> str:
    """An hdrh payload header of loadtest's layout, then 64 MiB of zeros: 65 KB encoded."""
    payload = struct.pack(">IIIIqqd", 0x1C849313, 1 << 26, 0, 3, 1, 3_600_000_000, 1.0)
    inner = zlib.compress(payload + b"\0" * (64 << 20), 9)
    return base64.b64encode(struct.pack(">II", 0x1C849314, len(inner)) + inner).decode()


def test_a_histogram_that_would_inflate_past_its_layout_is_refused_before_it_does():
    text = bomb()
    assert len(text) < 100_000
    with pytest.raises(ValueError, match="inflates past"):
        check_encoded(text)
    h = LatencyHistogram()
    h.record_us(1234)
    assert check_encoded(h.encode()) == h.encode()  # loadtest's own pass


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_report_gate_and_compare_refuse_a_bombed_result_naming_it(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", str(ROOT / "scenarios" / "poisson-sla.yml"),
         "-o", str(run), "-q", "--no-report", "--set", "load.duration=2s",
         "--set", "load.warmup=0s"],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert (run / "metrics.json").is_file(), r.stderr
    m = json.loads((run / "metrics.json").read_text())
    m["histograms"]["ttft"] = bomb()
    (run / "metrics.json").write_text(json.dumps(m))
    for args in (["report", run], ["gate", run, "--sla", ROOT / "scenarios" / "poisson-sla.yml"],
                 ["compare", run, run]):  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-m", "loadtest", *map(str, args)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        said = out.stdout + out.stderr
        assert out.returncode == 2, (args, said[-600:])
        assert "metrics.json" in said and "histograms.ttft" in said and "inflates past" in said
