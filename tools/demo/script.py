r"""Scripts for the scripted OpenAI-compatible server: what one chat-completions request is answered with.

A :class:`Script` is a list of ``chat.completion.chunk`` dicts played as SSE
(with delays, :class:`Pause`\ s, a mid-stream disconnect), or an HTTP error.
The helpers build the shapes real providers send, quirks included
(``tool_call_chunks(..., index="missing")``, ``reasoning_chunks(..., field="reasoning")``,
``think_chunks(...)``); :class:`~tools.demo.server.ScriptedLLMServer` plays them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

__all__ = [
    "Chunk",
    "Pause",
    "Responder",
    "Script",
    "ToolCallSpec",
    "chunk",
    "empty_chunk",
    "finish_chunk",
    "reasoning_chunks",
    "role_chunk",
    "split_text",
    "text_chunks",
    "think_chunks",
    "tool_call_chunks",
    "usage_chunk",
    "usage_dict",
]

Chunk: TypeAlias = dict[str, Any]
"""One ``chat.completion.chunk`` object (the envelope may be left to the server)."""

ToolCallSpec: TypeAlias = tuple[str | None, str, "Mapping[str, Any] | str"]
"""``(call_id, name, arguments)``; arguments as a dict (sent as JSON) or a raw string (sent verbatim, may be malformed)."""


@dataclass(frozen=True)
class Pause:
    """Inside ``Script.chunks``: wait this long before sending the next chunk."""

    seconds: float
    """How long to wait."""


ScriptItem: TypeAlias = "Chunk | Pause | str"
"""A chunk dict, a :class:`Pause`, or a raw string sent verbatim as one SSE ``data:`` payload."""


# --- chunk helpers ----------------------------------------------------------------


def split_text(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (at least one piece, even for ``""``)."""
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def chunk(delta: Mapping[str, Any] | None = None, *, finish_reason: str | None = None, **choice_extra: Any) -> Chunk:
    """A chunk with one choice carrying ``delta`` (extra keys go on the choice, e.g. Moonshot's ``usage``)."""
    choice: dict[str, Any] = {"index": 0, "delta": dict(delta or {}), "finish_reason": finish_reason}
    choice.update(choice_extra)
    return {"choices": [choice]}


def role_chunk() -> Chunk:
    """The opening chunk most providers send: ``role: assistant`` and empty content."""
    return chunk({"role": "assistant", "content": ""})


def text_chunks(text: str, size: int = 4, *, field: str = "content") -> list[Chunk]:
    """``text`` streamed ``size`` characters per chunk in ``delta[field]``."""
    return [chunk({field: piece}) for piece in split_text(text, size)]


def reasoning_chunks(
    text: str,
    size: int = 4,
    *,
    field: Literal["reasoning_content", "reasoning"] = "reasoning_content",
    content_null: bool = True,
) -> list[Chunk]:
    """Reasoning streamed like DeepSeek/Doubao/Qwen (``reasoning_content``) or Ollama/vLLM/OpenRouter (``reasoning``).

    With ``content_null`` each delta also carries ``"content": null``, as DeepSeek sends.
    """
    out = []
    for piece in split_text(text, size):
        delta: dict[str, Any] = {field: piece}
        if content_null:
            delta["content"] = None
        out.append(chunk(delta))
    return out


def think_chunks(thought: str, answer: str, size: int = 3) -> list[Chunk]:
    """Reasoning inline in content as ``<think>…</think>answer``, cut so the tags split across chunks."""
    return text_chunks(f"<think>{thought}</think>{answer}", size)


def finish_chunk(reason: str = "stop", **choice_extra: Any) -> Chunk:
    """The chunk that closes the choice (empty delta, ``finish_reason``)."""
    return chunk({}, finish_reason=reason, **choice_extra)


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> Chunk:
    """OpenAI's ``include_usage`` chunk: empty ``choices`` and the round's usage."""
    return {"choices": [], "usage": usage_dict(prompt_tokens, completion_tokens)}


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """A ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def empty_chunk() -> Chunk:
    """A chunk with empty ``choices`` (Azure's content-filter preamble, keep-alives)."""
    return {"choices": []}


def tool_call_chunks(
    calls: Sequence[ToolCallSpec],
    *,
    arg_size: int = 8,
    interleave: bool = False,
    index: Literal["normal", "missing", "zero"] = "normal",
    repeat_id: bool = False,
    repeat_name: bool = False,
    name_separate: bool = True,
) -> list[Chunk]:
    """Tool calls fragmented the way providers stream them.

    - ``arg_size``: characters of the arguments JSON per fragment.
    - ``interleave``: fragments of the calls alternate (round robin) instead of one call after another.
    - ``index``: ``normal`` (0, 1, …), ``missing`` (no ``index`` key at all), ``zero`` (every call ``index`` 0, distinct ids).
    - ``repeat_id`` / ``repeat_name``: the id / name is repeated in every fragment (some providers do).
    - ``name_separate``: the first fragment carries id and name with empty arguments (OpenAI style);
      otherwise the first argument piece rides along with the name.
    """
    per_call: list[list[dict[str, Any]]] = []
    for position, (call_id, name, arguments) in enumerate(calls):
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        pieces = split_text(raw, arg_size) if raw else []
        if name_separate:
            pieces = ["", *pieces]
        pieces = pieces or [""]
        fragments = []
        for n, piece in enumerate(pieces):
            fragment: dict[str, Any] = {}
            if index == "normal":
                fragment["index"] = position
            elif index == "zero":
                fragment["index"] = 0
            first = n == 0
            if call_id is not None and (first or repeat_id):
                fragment["id"] = call_id
            if first or repeat_id:
                fragment["type"] = "function"
            function: dict[str, Any] = {"arguments": piece}
            if first or repeat_name:
                function["name"] = name
            fragment["function"] = function
            fragments.append(fragment)
        per_call.append(fragments)

    ordered: list[dict[str, Any]] = []
    if interleave:
        for n in range(max((len(f) for f in per_call), default=0)):
            ordered.extend(fragments[n] for fragments in per_call if n < len(fragments))
    else:
        for fragments in per_call:
            ordered.extend(fragments)
    return [chunk({"tool_calls": [fragment]}) for fragment in ordered]


# --- scripts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """What the server does with one request."""

    chunks: Sequence[ScriptItem] = ()
    """Chunks to stream, in order; :class:`Pause` items wait, strings are sent verbatim as ``data:`` payloads."""
    status: int = 200
    """HTTP status; anything but 200 answers ``error_body`` as JSON instead of a stream."""
    error_body: Mapping[str, Any] | None = None
    """JSON body of an error answer (OpenAI style ``{"error": {...}}``); a generic one when ``None``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After``…)."""
    delay_s: float = 0.0
    """Wait before every chunk (and before the error answer)."""
    disconnect_after: int | None = None
    """Abort the connection after this many chunks (no ``[DONE]``, no clean end of the body)."""
    done: bool = True
    """Send ``data: [DONE]`` at the end."""

    @classmethod
    def text(
        cls,
        answer: str,
        chunk_size: int = 4,
        delay_s: float = 0.0,
        *,
        reasoning: str = "",
        usage: tuple[int, int] | None = (20, 10),
        **options: Any,
    ) -> Script:
        """A plain answer streamed ``chunk_size`` characters at a time, reasoning first if given, usage last."""
        items: list[ScriptItem] = [role_chunk()]
        if reasoning:
            items += reasoning_chunks(reasoning, chunk_size)
        items += text_chunks(answer, chunk_size)
        items.append(finish_chunk("stop"))
        if usage is not None:
            items.append(usage_chunk(*usage))
        return cls(chunks=items, delay_s=delay_s, **options)

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCallSpec],
        *,
        text: str = "",
        reasoning: str = "",
        usage: tuple[int, int] | None = (30, 15),
        delay_s: float = 0.0,
        chunk_size: int = 4,
        **quirks: Any,
    ) -> Script:
        """A round that calls tools (optionally after narration ``text``); ``quirks`` go to :func:`tool_call_chunks`."""
        items: list[ScriptItem] = [role_chunk()]
        if reasoning:
            items += reasoning_chunks(reasoning, chunk_size)
        if text:
            items += text_chunks(text, chunk_size)
        items += tool_call_chunks(calls, **quirks)
        items.append(finish_chunk("tool_calls"))
        if usage is not None:
            items.append(usage_chunk(*usage))
        return cls(chunks=items, delay_s=delay_s)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        type: str | None = None,
        code: str | None = None,
        retry_after: float | str | None = None,
    ) -> Script:
        """An HTTP error with an OpenAI-style body, optionally with ``Retry-After``."""
        defaults = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            403: "permission_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }
        body = {
            "error": {
                "message": message or f"scripted error {status}",
                "type": type or defaults.get(status, "server_error"),
                "param": None,
                "code": code,
            }
        }
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return cls(status=status, error_body=body, headers=headers)

    def with_options(self, **changes: Any) -> Script:
        """A copy with fields changed (``script.with_options(disconnect_after=3)``)."""
        return replace(self, **changes)


Responder: TypeAlias = Callable[[dict[str, Any]], "Script | Awaitable[Script]"]
"""Decides the script for a request body; may be sync or async."""
