"""The per-request export: derived latencies by hand, JSONL and CSV, outside text kept inert."""

from __future__ import annotations

import csv
import json

from tests.conftest import run_virtual_scenario


def test_each_request_is_exported_with_its_derived_latencies(tmp_path):
    data = {
        "name": "x",
        "backend": {
            "kind": "sim",
            "max_concurrency": 1,
            "prefill_ms_per_token": 10.0,
            "decode_ms_per_token": 5.0,
        },
        "workload": {"input_tokens": 1, "output_tokens": 3},
        "load": {"arrival": {"kind": "constant", "rate": 10}, "duration": "1s"},
        "goodput": {"ttft": "20ms"},
        "outputs": {"requests_jsonl": True},
        "telemetry": {"gpu": False},
    }
    run_virtual_scenario(tmp_path, data)
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    r = rows[0]
    # 10 ms of prefill, then a token every 5 ms: first token at 10 ms, three tokens by 20 ms
    assert r["status"] == "ok" and r["error"] is None and r["good"] is True
    assert r["ttft_ms"] == 10.0 and r["e2e_ms"] == 20.0 and r["tpot_ms"] == 5.0
    assert r["itl_max_ms"] == 5.0 and r["output_tokens"] == 3 and r["dispatch_lag_ms"] == 0.0
    assert r["token_ns"] == [r["first_token_ns"], r["first_token_ns"] + 5_000_000, r["done_ns"]]
    with (tmp_path / "run" / "requests.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 10 and "token_ns" not in table[0]
    assert table[0]["ttft_ms"] == "10.0" and table[0]["status"] == "ok"


def test_csv_cells_a_spreadsheet_would_run_stay_text(tmp_path):
    from loadtest.core import atomic

    atomic.write_csv(
        tmp_path / "r.csv",
        [{"response_id": "=HYPERLINK(1)", "error": "-1+1", "n": -3}],
        ["response_id", "error", "n"],
    )
    row = next(csv.DictReader((tmp_path / "r.csv").open()))
    assert row == {"response_id": "'=HYPERLINK(1)", "error": "'-1+1", "n": "-3"}
