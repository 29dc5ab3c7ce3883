"""A plan's tools and answer format in each API's shape (openai/bodies.py content_fields)."""

from loadtest.backends.openai.bodies import content_fields
from loadtest.workload.content import Content

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
STRUCTURED = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def test_chat_sends_tools_choice_and_format_as_given():
    c = Content([TOOL], {"type": "function", "function": {"name": "f"}}, STRUCTURED, SCHEMA)
    assert content_fields(c, "chat") == {
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": STRUCTURED,
    }


def test_the_responses_api_gets_flat_tools_a_flat_choice_and_a_text_format():
    c = Content([TOOL], {"type": "function", "function": {"name": "f"}}, STRUCTURED, SCHEMA)
    assert content_fields(c, "responses") == {
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "f"},
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}},
    }
    plain = Content(None, None, {"type": "json_object"})
    assert content_fields(plain, "responses") == {"text": {"format": {"type": "json_object"}}}


def test_no_tools_and_no_format_add_nothing():
    assert content_fields(Content(), "chat") == content_fields(Content(), "responses") == {}
    assert content_fields(Content([TOOL], "auto"), "completions") == {
        "tools": [TOOL],
        "tool_choice": "auto",
    }
