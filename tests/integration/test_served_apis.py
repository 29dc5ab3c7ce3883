"""Every API a deployment serves, against the recording stub (tests/stub_openai.py), with
figures computed by hand from what the stub answers: embeddings and rerank (one JSON answer,
inputs a request), the Responses API, tool calls (arguments stamped and checked), structured
answers, reasoning, and images and audio sent with each request."""

from __future__ import annotations

import base64
import io
import json
import wave

import pytest

pytest.importorskip("aiohttp")

from loadtest.config.loading import load_scenario
from loadtest.core.errors import ScenarioError
from loadtest.session import run_scenario
from tests.conftest import LENIENT, write_scenario
from tests.stub_openai import StubServer


def scenario(url: str, api: str, workload: dict, requests: int = 6, **extra) -> dict:
    return {
        "name": f"stub-{api}",
        "backend": {"kind": "openai", "base_url": url, "model": "stub", "api": api},
        "workload": workload,
        "load": {
            "arrival": {"kind": "concurrency", "users": 2},
            "requests": requests,
            "validity": LENIENT,
        },
        "outputs": {"requests_jsonl": True},
        "telemetry": {"gpu": False, "server": False},
        **extra,
    }


def run(tmp_path, data: dict) -> dict:
    return run_scenario(load_scenario(write_scenario(tmp_path, data), []), tmp_path / "run").metrics


def report_md(tmp_path) -> str:
    from loadtest.reporters import markdown
    from loadtest.results.model import read_run

    return markdown.render(read_run(tmp_path / "run" / "metrics.json"))


def report_html(tmp_path) -> str:
    from loadtest.reporters.html.run import run_html
    from loadtest.results.model import read_run

    return run_html(read_run(tmp_path / "run" / "metrics.json"))


def records(tmp_path) -> list[dict]:
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_embeddings_send_every_input_and_claim_no_token_figures(tmp_path):
    with StubServer() as stub:
        m = run(
            tmp_path,
            scenario(
                stub.url, "embeddings", {"input_tokens": 40, "inputs_per_request": 4},
                goodput={"e2e": "10s"}, sla={"e2e_p99": "10s"},
            ),
        )  # fmt: skip
        bodies = [b for b in stub.bodies if b["input"] != ["hello", "hello"]]  # not the probe
    assert m["status"] == "ok", m["validity"]
    assert len(bodies) == 6 and all(len(b["input"]) == 4 for b in bodies)
    assert all(len(set(b["input"])) == 4 for b in bodies)  # four texts, not one four times
    api = m["api"]
    assert api["name"] == "embeddings" and api["streams_tokens"] is False
    assert api["inputs_per_request"] == 4
    assert m["requests"]["completed"] == 6 and m["requests"]["input_tokens"] == 6 * 12
    lat = m["latency_ms"]
    assert lat["e2e"]["count"] == 6 and lat["ttft"]["count"] == 0 and lat["itl"]["count"] == 0
    t = m["throughput"]
    assert t["inputs_per_s"] == pytest.approx(4 * t["requests_per_s"])
    assert t["input_tokens_per_s"] == pytest.approx(12 * t["requests_per_s"])
    assert m["goodput"]["good"] == 6  # judged on e2e alone: a request with no token is good
    assert [c["name"] for c in m["sla"]["checks"]] == ["e2e_p99"]
    assert all(r["output_tokens"] == 0 and r["ttft_ms"] is None for r in records(tmp_path))
    report = report_md(tmp_path)
    assert "| inputs/s |" in report and "| ttft |" not in report


def test_rerank_sends_a_query_and_its_documents(tmp_path):
    with StubServer() as stub:
        m = run(tmp_path, scenario(stub.url, "rerank", {"input_tokens": 5, "documents": 3}))
        bodies = stub.bodies[1:]
    assert m["status"] == "ok", m["validity"]
    assert all(isinstance(b["query"], str) and len(b["documents"]) == 3 for b in bodies)
    assert m["api"]["inputs_per_request"] == 3
    assert m["requests"]["input_tokens"] == 6 * 15  # the stub: 5 tokens a document
    t = m["throughput"]
    assert t["inputs_per_s"] == pytest.approx(3 * t["requests_per_s"])
    html = report_html(tmp_path)
    assert "documents/s" in html


def test_the_responses_api_streams_its_deltas_as_tokens(tmp_path):
    with StubServer() as stub:
        m = run(tmp_path, scenario(stub.url, "responses", {"input_tokens": 5, "output_tokens": 7}))
        body = stub.bodies[-1]
    assert m["status"] == "ok", m["validity"]
    assert body["max_output_tokens"] == 7 and body["stream"] is True
    assert isinstance(body["input"], str)
    assert m["requests"]["output_tokens"] == 6 * 7  # a delta a token, as usage says
    assert m["latency_ms"]["ttft"]["count"] == 6 and m["latency_ms"]["itl"]["count"] == 6 * 6
    assert m["backend"]["http"].get("usage_implausible", 0) == 0


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.mark.parametrize(
    "arguments, bad_json, mismatch",
    [('{"city": "Paris"}', 0, 0), ('{"city": 5}', 0, 6), ('{"city": "Par', 6, 0)],
)
def test_tool_call_arguments_are_stamped_tokens_and_checked(
    tmp_path, arguments, bad_json, mismatch
):
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    with StubServer(tool_arguments=arguments) as stub:
        workload = {
            "input_tokens": 5,
            "output_tokens": 16,
            "output": "natural",
            "tools": {"file": "tools.json", "choice": "required"},
        }
        m = run(tmp_path, scenario(stub.url, "chat", workload))
        body = stub.bodies[-1]
    assert body["tools"] == TOOLS and body["tool_choice"] == "required"
    tc = m["api"]["tool_calls"]
    assert (tc["requests"], tc["requests_with_calls"], tc["calls"]) == (6, 6, 6)
    assert (tc["bad_json"], tc["schema_mismatch"], tc["missing"]) == (bad_json, mismatch, 0)
    # the name's chunk and the arguments' three: four tokens a call, each stamped on arrival
    assert m["requests"]["output_tokens"] == 6 * 4
    assert all(len(r["token_ns"]) == 4 for r in records(tmp_path))
    assert m["latency_ms"]["itl"]["count"] == 6 * 3
    report = report_md(tmp_path)
    assert "| tool calls | 6 in 6 of 6 requests (1 tools offered, tool_choice required) |" in report


def test_synthetic_tools_are_seeded_and_a_named_choice_forces_one(tmp_path):
    with StubServer() as stub:
        workload = {"input_tokens": 5, "tools": {"count": 3, "choice": "tool_1"}}
        m = run(tmp_path, scenario(stub.url, "chat", workload, requests=2))
        body = stub.bodies[-1]
    assert [t["function"]["name"] for t in body["tools"]] == ["tool_0", "tool_1", "tool_2"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "tool_1"}}
    # the stub calls the first tool offered: a call, but not the one forced; its arguments
    # break tool_0's schema (which requires parameters the stub does not send, or mismatches)
    assert m["api"]["tool_calls"]["calls"] == 2


@pytest.mark.parametrize(
    "answer, bad_json, mismatch",
    [('{"title": "t", "score": 7}', 0, 0), ('{"title": "t"}', 0, 2), ("title: t", 2, 0)],
)
def test_structured_answers_are_checked_against_their_schema(tmp_path, answer, bad_json, mismatch):
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["title", "score"],
    }
    with StubServer(answer=answer) as stub:
        workload = {
            "input_tokens": 5,
            "output_tokens": 32,
            "output": "natural",
            "response_format": {"type": "json_schema", "schema": schema},
        }
        m = run(tmp_path, scenario(stub.url, "chat", workload, requests=2))
        body = stub.bodies[-1]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    sc = m["api"]["structured"]
    assert (sc["checked"], sc["bad_json"], sc["schema_mismatch"]) == (2, bad_json, mismatch)


def test_reasoning_tokens_are_counted_apart_with_the_time_to_the_answer(tmp_path):
    with StubServer(reasoning=3) as stub:
        workload = {"input_tokens": 5, "output_tokens": 8}
        m = run(tmp_path, scenario(stub.url, "chat", workload, sla={"ttft_answer_p99": "10s"}))
    assert m["status"] == "ok", m["validity"]
    assert m["requests"]["reasoning_tokens"] == 6 * 3
    assert (m["api"]["reasoning_tokens"], m["api"]["answer_tokens"]) == (18, 30)
    lat = m["latency_ms"]
    assert lat["ttft_answer"]["count"] == 6
    assert lat["ttft_answer"]["min"] >= lat["ttft"]["min"]
    (check,) = m["sla"]["checks"]  # an SLA bound on it, judged on its 6 samples
    assert (check["name"], check["samples"]) == ("ttft_answer_p99", 6)
    for r in records(tmp_path):
        assert r["reasoning_tokens"] == 3
        # the answer's first token is the 4th stamp: its time from the intended send
        assert r["ttft_answer_ms"] == pytest.approx((r["token_ns"][3] - r["intended_ns"]) / 1e6)


def test_images_and_audio_go_with_each_request_as_real_files(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    with StubServer() as stub:
        workload = {
            "input_tokens": 5,
            "output_tokens": 2,
            "images": {"count": 2, "width": 64, "height": 48, "format": "png"},
            "audio": {"seconds": 0.5, "sample_rate": 8000},
        }
        m = run(tmp_path, scenario(stub.url, "chat", workload, requests=3))
        bodies = stub.bodies[1:]
    parts = [b["messages"][0]["content"] for b in bodies]
    assert all(
        [p["type"] for p in c] == ["text", "image_url", "image_url", "input_audio"] for c in parts
    )
    urls = {c[1]["image_url"]["url"] for c in parts}
    assert len(urls) == 3  # every request its own images (seeded)
    head, data = parts[0][1]["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64"
    image = PIL.open(io.BytesIO(base64.b64decode(data)))
    assert (image.format, image.size) == ("PNG", (64, 48))
    clip = wave.open(io.BytesIO(base64.b64decode(parts[0][3]["input_audio"]["data"])))
    assert (clip.getframerate(), clip.getnframes(), clip.getsampwidth()) == (8000, 4000, 2)
    media = m["api"]["media"]
    assert media["images_per_request"] == 2 and media["image_size"] == "64x48 png"
    assert media["audio_per_request"] == 1 and media["audio_seconds"] == 0.5
    assert media["audio_bytes_mean"] == 44 + 2 * 4000  # a WAV header and 16-bit samples
    assert media["distinct_sets"] == 3  # one a request


@pytest.mark.parametrize(
    "api, workload, expected",
    [
        ("chat", {"inputs_per_request": 4}, "workload.inputs_per_request: inputs_per_request is for api: embeddings"),
        ("embeddings", {"documents": 4}, "documents is for api: rerank"),
        ("completions", {"images": {"count": 1}}, "images is for api: chat or responses"),
        ("chat", {"images": {"width": 0}}, "workload.images.width"),
        ("chat", {"tools": {"count": 2, "file": "t.json"}}, "give file"),
        ("chat", {"tools": "missing.json"}, "workload.tools.file: file not found"),
        ("chat", {"tools": "notalist.json"}, "notalist.json: workload.tools.file: expected a JSON list"),
        ("chat", {"tools": "broken.json"}, "broken.json:3: workload.tools.file: not JSON"),
        ("chat", {"tools": "noname.json"}, "noname.json: tool [0]: function.name"),
        ("chat", {"response_format": {"type": "json_schema"}}, "needs one of schema"),
        ("chat", {"response_format": {"type": "json_schema", "schema": {"type": 5}}}, "not a valid JSON Schema"),
        ("chat", {"tools": {"count": 1, "choice": "nope"}}, "'nope' is not auto, required"),
    ],
)  # fmt: skip
def test_bad_api_input_is_refused_naming_the_field(tmp_path, api, workload, expected):
    (tmp_path / "notalist.json").write_text('{"type": "function"}')
    (tmp_path / "broken.json").write_text('[\n  {"type": \n')
    (tmp_path / "noname.json").write_text('[{"type": "function", "function": {}}]')
    data = scenario("http://127.0.0.1:9/v1", api, {"input_tokens": 5, **workload})
    path = write_scenario(tmp_path, data)
    from loadtest.workload.plan import check_plan

    with pytest.raises(ScenarioError) as err:
        loaded = load_scenario(path, [])
        check_plan(loaded.scenario, lambda n: tmp_path / n)
    assert expected in str(err.value)


def test_a_datasets_images_are_sent_beside_its_prompts(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    image = tmp_path / "cat.png"
    PIL.new("RGB", (8, 6), (200, 10, 10)).save(image)
    rows = [
        {"prompt": "what is this?", "images": ["cat.png", "https://example.com/dog.jpg"]},
        {"messages": [{"role": "user", "content": "and this?"}], "images": "cat.png"},
    ]
    (tmp_path / "vision.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with StubServer() as stub:
        workload = {"dataset": "vision.jsonl", "output_tokens": 2}
        run(tmp_path, scenario(stub.url, "chat", workload, requests=4))
        bodies = stub.bodies[1:]
    expected_file = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    seen = set()
    for b in bodies:
        (message,) = b["messages"]
        text, *images = message["content"]
        seen.add(text["text"])
        urls = [p["image_url"]["url"] for p in images]
        if text["text"] == "what is this?":
            assert urls == [expected_file, "https://example.com/dog.jpg"]
        else:
            assert urls == [expected_file]
    assert seen == {"what is this?", "and this?"}


def test_a_dataset_image_that_is_not_there_is_named_with_its_row(tmp_path):
    (tmp_path / "vision.jsonl").write_text(
        '{"prompt": "a"}\n{"prompt": "b", "images": ["gone.png"]}\n'
    )
    data = scenario("http://127.0.0.1:9/v1", "chat", {"dataset": "vision.jsonl"})
    from loadtest.workload.plan import check_plan

    loaded = load_scenario(write_scenario(tmp_path, data), [])
    with pytest.raises(ScenarioError) as err:
        check_plan(loaded.scenario, lambda n: tmp_path / n)
    assert "vision.jsonl:2: images:" in str(err.value) and "gone.png: not found" in str(err.value)


def test_a_dcgm_exporter_gives_a_served_run_the_servers_gpu_section(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    energy = iter(range(1_000_000, 10**9, 50_000))  # mJ: 50 J more at each read

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self):
            labels = 'gpu="0",UUID="GPU-a",modelName="NVIDIA H100",Hostname="gpu-host"'
            body = (
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 87\n"
                f"DCGM_FI_DEV_FB_USED{{{labels}}} 70000\n"
                f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {next(energy)}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    exporter = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{exporter.server_address[1]}/metrics"
    try:
        with StubServer() as stub:
            data = scenario(stub.url, "chat", {"input_tokens": 5, "output_tokens": 4})
            data["telemetry"] = {
                "gpu": "auto", "server": False, "dcgm": url, "server_interval": "50ms",
            }  # fmt: skip
            # a window of 0.55 s by the schedule, however fast the stub answers: several 50 ms
            # samples in it (two users finishing 6 requests at once could fall between two)
            data["load"].update(arrival={"kind": "constant", "rate": 20}, requests=12)
            m = run(tmp_path, data)
    finally:
        exporter.shutdown()
    gpu = m["gpu"]
    assert gpu["available"] and gpu["source"] == f"DCGM exporter {url}"
    (device,) = gpu["devices"]
    assert (device["name"], device["uuid"], device["host"]) == ("NVIDIA H100", "GPU-a", "gpu-host")
    assert device["utilization_gpu_pct"]["mean"] == 87.0
    assert device["peak_memory_mib"] == 70000.0
    assert device["energy_j"] > 0 and device["energy_j"] % 50 == 0  # whole reads of 50 J each
    assert (tmp_path / "run" / "gpu.csv").read_text().count("\n") >= 3
    # every report renders the exporter's section (its sampler row has no CPU cost of ours)
    for text in (report_md(tmp_path), report_html(tmp_path)):
        assert f"read errors (DCGM exporter {url})" in text and "of one CPU core" not in text


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"sla": {"ttft_p99": "1s"}}, "sla.ttft_p99: api: embeddings streams no tokens"),
        ({"sla": {"ttft_answer_p99": "1s"}}, "sla.ttft_answer_p99: api: embeddings streams"),
        ({"goodput": {"tpot": "5ms"}}, "goodput: api: embeddings streams no tokens"),
    ],
)
def test_objectives_on_figures_an_api_does_not_have_are_refused(tmp_path, extra, expected):
    data = scenario("http://127.0.0.1:9/v1", "embeddings", {"input_tokens": 5}, **extra)
    with pytest.raises(ScenarioError) as err:
        load_scenario(write_scenario(tmp_path, data), [])
    assert expected in str(err.value)


def test_a_stream_whose_usage_matches_its_chunks_is_never_tokenized(
    tmp_path, tiny_model_dir, monkeypatch
):
    """The stub streams a chunk a token and closes with a chunk that has only the finish
    reason; its usage says as many tokens as chunks with text. Each of those is a token,
    stamped at its arrival: the tokenizer is not asked (it would split the stub's words, and
    cost the client ~4 µs a chunk after every stream)."""
    from loadtest.backends.openai import tokens

    def refuse(self, chunks):
        raise AssertionError("a chunk's text was tokenized")

    monkeypatch.setattr(tokens.TokenCounter, "counted", refuse)
    data = scenario("", "completions", {"input_tokens": 8, "output_tokens": 6})
    data["backend"]["tokenizer"] = str(tiny_model_dir)
    with StubServer() as stub:
        data["backend"]["base_url"] = stub.url
        m = run(tmp_path, data)
    assert m["requests"]["completed"] == 6 and m["requests"]["failed"] == 0
    assert [r["output_tokens"] for r in records(tmp_path)] == [6] * 6


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("/etc/passwd", "outside the dataset's folder"),  # absolute, elsewhere
        ("../secret.png", "outside the dataset's folder"),  # up and out
        ("link.png", "outside the dataset's folder"),  # a link named .png, to a file outside
        ("fake.png", "not a image/png file by its content"),  # inside, but no image
    ],
)
def test_a_dataset_image_path_never_reads_a_file_outside_its_folder(tmp_path, name, said):
    """A dataset row is outside text: the files it names are read only inside the dataset's
    folder, links followed, and only when they are images; never sent to the server otherwise."""
    folder = tmp_path / "data"
    folder.mkdir()
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG not for the server")
    (folder / "link.png").symlink_to(secret)
    (folder / "fake.png").write_text("a text file named .png")
    (folder / "vision.jsonl").write_text(json.dumps({"prompt": "a", "images": [name]}) + "\n")
    data = scenario("http://127.0.0.1:9/v1", "chat", {"dataset": "data/vision.jsonl"})
    from loadtest.workload.plan import check_plan

    loaded = load_scenario(write_scenario(tmp_path, data), [])
    with pytest.raises(ScenarioError) as err:
        check_plan(loaded.scenario, lambda n: tmp_path / n)
    assert "vision.jsonl:1: images:" in str(err.value) and said in str(err.value), err.value


def test_a_model_mix_shows_each_models_server_side_queue_and_ttft_beside_its_own(tmp_path):
    """A server whose /metrics label each model's series (a gateway of two models): each
    model's share of the result holds the server's own queue time and TTFT for it (10 ms and
    20 ms for a, 30 ms and 60 ms for b, by the stub's accounting), and the report shows them."""
    # 20 ms a word: the window (12 requests of 80 ms, two at a time) spans several samples
    with StubServer(queue_s={"a": 0.01, "b": 0.03}, word_gap_s=0.02) as stub:
        data = scenario(stub.url, "chat", {"input_tokens": 5, "output_tokens": 4,
                                           "models": {"a": 1, "b": 1}}, requests=12)  # fmt: skip
        data["telemetry"] = {"gpu": False, "server_interval": "50ms"}
        m = run(tmp_path, data)
    models = m["traffic"]["models"]
    assert models["a"]["server"]["queue_s"]["window_mean"] == pytest.approx(0.01)
    assert models["a"]["server"]["ttft_s"]["window_mean"] == pytest.approx(0.02)
    assert models["b"]["server"]["queue_s"]["window_mean"] == pytest.approx(0.03)
    assert "the server's: queue mean 30 ms, TTFT mean 60 ms" in report_md(tmp_path)
