"""ShareGPT files (detected from content) and shared-prefix synthetic prompts."""

from __future__ import annotations

import json

import pytest

from loadtest.config.scenario import Scenario
from loadtest.core.errors import ScenarioError
from loadtest.workload.plan import build_plan, read_dataset
from loadtest.workload.tokenizer import ByteTokenizer

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "hi there"},
            {"from": "gpt", "value": "hello"},
        ],
    },
    {"id": "b", "conversations": [{"from": "gpt", "value": "only a reply"}]},
    {
        "id": "c",
        "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "why?"}],
    },
]


@pytest.mark.parametrize("shape", ["json", "jsonl"])
def test_a_sharegpt_file_is_recognised_and_each_first_human_turn_is_a_prompt(tmp_path, shape):
    path = tmp_path / f"sg.{shape}"
    if shape == "json":
        path.write_text(json.dumps(SHAREGPT, indent=1))
    else:
        path.write_text("\n".join(json.dumps(x) for x in SHAREGPT))
    rows = read_dataset(path, ByteTokenizer())
    # conversation b has no human turn: no prompt
    assert [r.messages for r in rows] == [
        ({"role": "user", "content": "hi there"},),
        ({"role": "user", "content": "why?"},),
    ]


def test_a_malformed_sharegpt_entry_names_where(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([SHAREGPT[0], {"conversations": "not a list"}]))
    with pytest.raises(ScenarioError, match=r"sg.json:\[1\]: conversations"):
        read_dataset(path, ByteTokenizer())


def test_shared_prefix_prompts_start_with_their_groups_prefix():
    sc = Scenario.model_validate(
        {
            "name": "p",
            "seeds": {"prompts": 7},
            "workload": {
                "input_tokens": 10,
                "output_tokens": 2,
                "shared_prefix": {"groups": 3, "tokens": 50},
            },
            "load": {"arrival": {"kind": "burst"}, "requests": 60},
        }
    )
    tok = ByteTokenizer()
    plan = build_plan(sc, tok, lambda p: p)
    reqs = plan.requests
    assert {r.input_tokens for r in reqs} == {60}  # 50 shared + 10 of its own
    assert {r.prefix_group for r in reqs} == {0, 1, 2}  # every group is used
    ids = {r.index: plan.prompt_ids(r, tok) for r in reqs}
    for g in range(3):
        members = [ids[r.index] for r in reqs if r.prefix_group == g]
        assert len({tuple(m[:50]) for m in members}) == 1  # one prefix a group
        assert len({tuple(m[50:]) for m in members}) == len(members)  # suffixes differ
    prefixes = {tuple(ids[r.index][:50]) for r in reqs}
    assert len(prefixes) == 3 and all(len(v) == 60 for v in ids.values())
    # the same seeds, the same plan (and prompts)
    again = build_plan(sc, tok, lambda p: p)
    assert again.to_jsonl() == plan.to_jsonl()


def test_shared_prefix_is_for_synthetic_prompts():
    with pytest.raises(ValueError, match="shared_prefix is for synthetic prompts"):
        Scenario.model_validate(
            {
                "name": "p",
                "workload": {"dataset": "x.jsonl", "shared_prefix": {"groups": 1, "tokens": 5}},
                "load": {"arrival": {"kind": "burst"}, "requests": 1},
            }
        )


def _saved_dataset(tmp_path, rows: list[dict], splits: tuple[str, ...] = ()):
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_list(rows)
    if splits:
        data = datasets.DatasetDict({s: data for s in splits})
    data.save_to_disk(str(tmp_path / "ds"))


def test_a_hugging_face_dataset_is_read_with_its_column_mapped(tmp_path):
    _saved_dataset(tmp_path, [{"question": "abc", "id": 1}, {"question": "hello", "id": 2}])
    rows = read_dataset(
        "hf:ds", ByteTokenizer(), resolve=lambda p: tmp_path / p, columns={"prompt": "question"}
    )
    assert [(r.text, len(r.token_ids)) for r in rows] == [("abc", 3), ("hello", 5)]


def test_a_hugging_face_dataset_of_conversations_feeds_sessions(tmp_path):
    convo = [
        {"from": "human", "value": "a"},
        {"from": "gpt", "value": "b"},
        {"from": "human", "value": "cc"},
    ]
    _saved_dataset(tmp_path, [{"conversations": convo}], splits=("train", "test"))
    (row,) = read_dataset(
        "hf:ds", ByteTokenizer(), resolve=lambda p: tmp_path / p, split="test", sessions=True
    )
    assert row.turns == ("a", "cc") and row.turn_tokens == (1, 2)


def test_a_hugging_face_dataset_names_the_missing_column_or_split(tmp_path):
    _saved_dataset(tmp_path, [{"question": "abc"}], splits=("train",))
    resolve = lambda p: tmp_path / p  # noqa: E731
    with pytest.raises(ScenarioError, match="no column 'prompt_text' .it has question"):
        read_dataset("hf:ds", ByteTokenizer(), resolve=resolve, columns={"prompt": "prompt_text"})
    with pytest.raises(ScenarioError, match="no split 'validation' .it has train"):
        read_dataset("hf:ds", ByteTokenizer(), resolve=resolve, split="validation")
    with pytest.raises(ScenarioError, match=r"hf:ds \(train\):row 0: expected"):
        read_dataset("hf:ds", ByteTokenizer(), resolve=resolve)  # no prompt column, unmapped
