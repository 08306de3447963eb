"""Stream assembly over chunk sequences in the style real providers send.

Chunks go through JSON text and ``orjson`` the way :mod:`botgateway.model.sse` parses
SSE data, so each quirk reaches the assembler exactly as it would in
production. The same quirks run end to end through the client and the
scripted server in ``test_llm.py``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from botgateway.events import Usage
from botgateway.model import (
    AssembledRound,
    ReasoningPart,
    StreamAssembler,
    TextPart,
    ThinkTagSplitter,
    ToolCallFragment,
)


def wire_chunk(data: dict[str, Any]) -> dict[str, Any]:
    envelope = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    parsed: dict[str, Any] = orjson.loads(json.dumps({**envelope, **data}))
    return parsed


def delta(d: dict[str, Any], finish: str | None = None, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish, **choice}]}


def run(chunks: list[dict[str, Any]], round: int = 1) -> tuple[list[Any], AssembledRound]:
    assembler = StreamAssembler(round)
    parts: list[Any] = []
    for raw in chunks:
        parts.extend(assembler.feed(wire_chunk(raw)))
    return parts, assembler.finish()


def texts(parts: list[Any], kind: type) -> str:
    return "".join(p.text for p in parts if isinstance(p, kind))


# --- text, reasoning, usage -----------------------------------------------------------


def test_openai_text_with_usage_in_last_chunk_with_empty_choices() -> None:
    chunks = [
        delta({"role": "assistant", "content": "", "refusal": None}),
        delta({"content": "Hello"}),
        delta({"content": ", world"}),
        delta({}, finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}},
    ]
    parts, result = run(chunks)
    assert texts(parts, TextPart) == "Hello, world"
    assert result.text == "Hello, world"
    assert result.usage == Usage(prompt_tokens=12, completion_tokens=3)
    assert result.finish_reason == "stop"
    assert result.tool_calls == ()


def test_no_usage_at_all() -> None:
    _, result = run([delta({"content": "hi"}), delta({}, finish="stop")])
    assert result.usage is None


def test_deepseek_reasoning_content_then_content() -> None:
    # DeepSeek-reasoner: reasoning_content with content null, then content with reasoning_content null.
    chunks = [
        delta({"role": "assistant", "content": None, "reasoning_content": ""}),
        delta({"content": None, "reasoning_content": "The user "}),
        delta({"content": None, "reasoning_content": "asks about an IP."}),
        delta({"content": "It is ", "reasoning_content": None}),
        delta({"content": "web-1.", "reasoning_content": None}),
        delta({"content": "", "reasoning_content": None}, finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}},
    ]
    parts, result = run(chunks)
    assert texts(parts, ReasoningPart) == "The user asks about an IP."
    assert texts(parts, TextPart) == "It is web-1."
    assert result.reasoning == "The user asks about an IP."
    assert result.text == "It is web-1."
    # Reasoning came first, in stream order.
    assert isinstance(parts[0], ReasoningPart)


def test_ollama_vllm_reasoning_field() -> None:
    chunks = [
        delta({"role": "assistant", "content": "", "reasoning": "Let me think"}),
        delta({"content": "", "reasoning": " briefly."}),
        delta({"content": "Done."}, finish="stop"),
    ]
    _parts, result = run(chunks)
    assert result.reasoning == "Let me think briefly."
    assert result.text == "Done."


def test_reasoning_sent_in_both_fields_is_not_doubled() -> None:
    # Some gateways mirror the same text into reasoning and reasoning_content.
    chunks = [delta({"reasoning": "same", "reasoning_content": "same"}), delta({"content": "ok"})]
    _, result = run(chunks)
    assert result.reasoning == "same"


def test_qwen_usage_on_every_chunk_last_wins() -> None:
    # DashScope compatible mode may report cumulative usage on each chunk.
    chunks = [
        {**delta({"content": "a"}), "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}},
        {**delta({"content": "b"}, finish="stop"), "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
    ]
    _, result = run(chunks)
    assert result.usage == Usage(prompt_tokens=10, completion_tokens=2)


def test_moonshot_usage_inside_the_choice() -> None:
    chunks = [
        delta({"role": "assistant", "content": "Hi"}),
        delta({}, finish="stop", usage={"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}),
    ]
    _, result = run(chunks)
    assert result.usage == Usage(prompt_tokens=8, completion_tokens=1)


def test_empty_choices_and_null_tool_calls_are_harmless() -> None:
    # Azure sends a prompt-filter chunk with empty choices first; some providers send tool_calls: null.
    chunks = [
        {"choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
        delta({"role": "assistant", "content": "", "tool_calls": None}),
        delta({"content": "fine", "tool_calls": None}),
        {"choices": []},
        delta({"tool_calls": None}, finish="stop"),
    ]
    parts, result = run(chunks)
    assert result.text == "fine"
    assert result.tool_calls == ()
    assert not any(isinstance(p, ToolCallFragment) for p in parts)



def test_refusal_is_shown_as_text() -> None:
    chunks = [delta({"role": "assistant", "content": None, "refusal": "I can't "}), delta({"refusal": "help with that."}, finish="stop")]
    parts, result = run(chunks)
    assert texts(parts, TextPart) == "I can't help with that."
    assert result.text == "I can't help with that."


def test_choices_other_than_index_0_are_ignored() -> None:
    chunks = [
        {"choices": [{"index": 1, "delta": {"content": "alternative"}, "finish_reason": "length"}, {"index": 0, "delta": {"content": "kept"}}]},
        {"choices": [{"delta": {"content": " too"}, "finish_reason": "stop"}]},  # no index: the only choice
    ]
    _, result = run(chunks)
    assert result.text == "kept too"
    assert result.finish_reason == "stop"


def test_fields_of_unexpected_types_are_ignored() -> None:
    # Sloppy gateways: nothing here may break the round or invent output.
    chunks = [
        {"choices": "none"},
        {"choices": [None, 3, {"index": 0, "delta": "text"}]},
        delta({"content": 5, "reasoning_content": ["x"], "tool_calls": {"index": 0}}),
        delta({"tool_calls": [None, {"index": True, "id": 7, "function": "f"}]}),
        {**delta({"content": "ok"}, finish=1), "usage": {"prompt_tokens": "many", "completion_tokens": {}}},
        {"choices": [], "usage": [1, 2]},
    ]
    _, result = run(chunks)
    assert result.text == "ok"
    assert result.reasoning == "" and result.tool_calls == ()
    assert result.usage is None and result.finish_reason is None

# --- <think> inline -------------------------------------------------------------------


def test_think_tags_split_across_chunks() -> None:
    # DeepSeek-R1 served by Ollama/vLLM without a reasoning parser: tags inside content, cut anywhere.
    pieces = ["<th", "ink>\nCheck the ", "inventory.</", "thi", "nk>\n\nweb-1 is ", "running."]
    parts, result = run([delta({"content": p}) for p in pieces])
    assert result.reasoning == "\nCheck the inventory."
    assert result.text == "web-1 is running."
    assert "<" not in texts(parts, TextPart)
    assert "think>" not in result.reasoning


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_think_tags_any_cut(size: int) -> None:
    raw = "<think>plan: look up</think>Answer <b>bold</b> < 3"
    chunks = [delta({"content": raw[i : i + size]}) for i in range(0, len(raw), size)]
    _, result = run(chunks)
    assert result.reasoning == "plan: look up"
    assert result.text == "Answer <b>bold</b> < 3"


def test_half_tag_at_end_is_text() -> None:
    splitter = ThinkTagSplitter()
    parts = splitter.feed("a <thi")
    assert parts == [TextPart("a ")]
    assert splitter.flush() == [TextPart("<thi")]


# --- tool calls -----------------------------------------------------------------------


def args_of(result: AssembledRound) -> list[tuple[str, str, dict[str, Any]]]:
    return [(c.call_id, c.name, c.arguments) for c in result.tool_calls]


def test_openai_parallel_calls_interleaved() -> None:
    chunks = [
        delta({"role": "assistant", "content": None}),
        delta({"tool_calls": [{"index": 0, "id": "call_A", "type": "function", "function": {"name": "search_ecs_by_ip", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_B", "type": "function", "function": {"name": "search_cvm_by_ip", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"ip": '}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"ip": "10.'}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"10.0.0.1"}'}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '0.0.2"}'}}]}),
        delta({}, finish="tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}},
    ]
    parts, result = run(chunks)
    assert args_of(result) == [
        ("call_A", "search_ecs_by_ip", {"ip": "10.0.0.1"}),
        ("call_B", "search_cvm_by_ip", {"ip": "10.0.0.2"}),
    ]
    assert result.finish_reason == "tool_calls"
    fragments = [p for p in parts if isinstance(p, ToolCallFragment)]
    assert [f.position for f in fragments] == [0, 1, 0, 1, 0, 1]


def test_two_calls_in_one_chunk() -> None:
    chunks = [
        delta({"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y": 2}'}},
        ]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("a", "f", {"x": 1}), ("b", "g", {"y": 2})]


def test_missing_index_falls_back_to_id_then_last_call() -> None:
    # Some gateways (older Gemini-compat, custom proxies) omit index entirely.
    chunks = [
        delta({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "find_server", "arguments": ""}}]}),
        delta({"tool_calls": [{"function": {"arguments": '{"query": "web'}}]}),
        delta({"tool_calls": [{"function": {"arguments": '-1"}'}}]}),
        delta({"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "find_server", "arguments": '{"query"'}}]}),
        delta({"tool_calls": [{"function": {"arguments": ': "db-1"}'}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("c1", "find_server", {"query": "web-1"}), ("c2", "find_server", {"query": "db-1"})]


def test_missing_index_interleaved_with_repeated_ids() -> None:
    chunks = [
        delta({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]}),
        delta({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": '{"b"'}}]}),
        delta({"tool_calls": [{"id": "c1", "function": {"arguments": ": 1}"}}]}),
        delta({"tool_calls": [{"id": "c2", "function": {"arguments": ": 2}"}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("c1", "f", {"a": 1}), ("c2", "g", {"b": 2})]


def test_every_call_index_zero_with_distinct_ids() -> None:
    # Qwen/Doubao style: each call starts with index 0 and a new id; continuations carry index 0 only.
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "search_ecs_by_ip", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"ip": "10.0.0.1"}'}}]}),
        delta({"tool_calls": [{"index": 0, "id": "call_2", "type": "function", "function": {"name": "search_cvm_by_ip", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"ip": "10.0.0.1"}'}}]}),
        delta({}, finish="tool_calls"),
    ]
    _, result = run(chunks)
    assert args_of(result) == [
        ("call_1", "search_ecs_by_ip", {"ip": "10.0.0.1"}),
        ("call_2", "search_cvm_by_ip", {"ip": "10.0.0.1"}),
    ]


def test_name_and_id_repeated_in_every_fragment_are_assigned_not_concatenated() -> None:
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "x1", "type": "function", "function": {"name": "find_server", "arguments": '{"qu'}}]}),
        delta({"tool_calls": [{"index": 0, "id": "x1", "type": "function", "function": {"name": "find_server", "arguments": 'ery": "'}}]}),
        delta({"tool_calls": [{"index": 0, "id": "x1", "type": "function", "function": {"name": "find_server", "arguments": 'a"}'}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("x1", "find_server", {"query": "a"})]


def test_id_arrives_after_the_first_fragment() -> None:
    chunks = [
        delta({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "id": "late", "function": {"arguments": "{}"}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("late", "f", {})]


def test_missing_ids_get_stable_ones() -> None:
    chunks = [
        delta({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": ""}}]}),
    ]
    _, first = run(chunks, round=3)
    _, again = run(chunks, round=3)
    assert [c.call_id for c in first.tool_calls] == ["call_3_1", "call_3_2"]
    assert [c.call_id for c in again.tool_calls] == ["call_3_1", "call_3_2"]
    assert first.tool_calls[1].arguments == {} and first.tool_calls[1].parse_error is None


def test_full_arguments_resent_at_the_end_are_not_doubled() -> None:
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x": '}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("a", "f", {"x": 1})]


def test_malformed_arguments_are_reported_and_sanitized() -> None:
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x": 1'}}]}),
        delta({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "[1, 2]"}}]}),
    ]
    _, result = run(chunks)
    bad, not_object = result.tool_calls
    assert bad.arguments == {} and "not valid JSON" in (bad.parse_error or "")
    assert bad.arguments_json == '{"x": 1'
    assert bad.valid_arguments_json == "{}"
    assert not_object.parse_error == "arguments must be a JSON object"
    json.loads(not_object.valid_arguments_json)


def test_narration_then_tool_call_doubao_style() -> None:
    # Doubao: reasoning_content, then a line of narration, then the call with index 0.
    chunks = [
        delta({"role": "assistant", "reasoning_content": "need lookup"}),
        delta({"content": "Let me check."}),
        delta({"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "find_server", "arguments": '{"query":"10.0.1.100"}'}}]}),
        delta({}, finish="tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    ]
    parts, result = run(chunks)
    assert [type(p) for p in parts] == [ReasoningPart, TextPart, ToolCallFragment]
    assert result.text == "Let me check."
    assert args_of(result) == [("call_x", "find_server", {"query": "10.0.1.100"})]


def test_one_id_reused_for_parallel_calls_at_different_indexes() -> None:
    # Seen on self-hosted gateways that stamp every call "call_0": the index tells the calls apart.
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "call_0", "function": {"name": "f", "arguments": '{"a": 1}'}}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_0", "function": {"name": "g", "arguments": '{"b": '}}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_0", "function": {"arguments": "2}"}}]}),
    ]
    _, result = run(chunks)
    assert args_of(result) == [("call_0", "f", {"a": 1}), ("call_0_2", "g", {"b": 2})]


def test_back_to_back_argument_objects_under_one_index_are_separate_calls_with_unique_ids() -> None:
    # Seen on some providers: two complete calls streamed under one index and one id.
    chunks = [
        delta({"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "find_server", "arguments": '{"query": "10.0.1.100"}'}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": ' {"query": "10.0.2.7"}\n{"query": '}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"db-1"}'}}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_x_2", "type": "function", "function": {"name": "list_servers", "arguments": "{}"}}]}),
        delta({}, finish="tool_calls"),
    ]
    _, result = run(chunks)
    _, again = run(chunks)
    assert args_of(result) == [
        ("call_x", "find_server", {"query": "10.0.1.100"}),
        ("call_x_3", "find_server", {"query": "10.0.2.7"}),  # call_x_2 is the provider's id of another call
        ("call_x_4", "find_server", {"query": "db-1"}),
        ("call_x_2", "list_servers", {}),
    ]
    assert args_of(again) == args_of(result)
    assert [c.arguments_json for c in result.tool_calls[:3]] == ['{"query": "10.0.1.100"}', '{"query": "10.0.2.7"}', '{"query": "db-1"}']
    assert all(c.parse_error is None for c in result.tool_calls)


def test_two_objects_without_ids_split_into_stable_ids() -> None:
    chunks = [delta({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a": 1}{"a": 2}'}}]})]
    _, result = run(chunks, round=2)
    assert args_of(result) == [("call_2_1", "f", {"a": 1}), ("call_2_1_2", "f", {"a": 2})]


@pytest.mark.parametrize("raw", ['{"a": 1}{"b": ', '{"a": 1} and more', '{"a": 1}[2]', '{"a": 1}{}x'])
def test_an_unsplittable_tail_stays_one_call_with_a_readable_error(raw: str) -> None:
    _, result = run([delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": raw}}]})])
    (call,) = result.tool_calls
    assert call.call_id == "a" and call.arguments == {} and call.arguments_json == raw
    assert (call.parse_error or "").startswith("arguments are not valid JSON (Extra data at position ")
    assert call.valid_arguments_json == "{}"
