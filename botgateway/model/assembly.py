"""Stream assembly: fold streamed chat-completion chunks into text, thought and tool calls.

OpenAI-compatible providers disagree on the details of streaming, so the fold
is defensive:

- reasoning arrives as ``delta.reasoning_content`` (DeepSeek, Doubao, Qwen) or
  ``delta.reasoning`` (Ollama, vLLM, OpenRouter), or inline in the content as
  ``<think>…</think>`` (tags may be split across chunks);
- ``delta.tool_calls`` may be ``None``; ``choices`` may be empty; usage may come
  only in the last chunk, inside the choice (Moonshot), or never; cached prompt
  tokens are reported as ``prompt_tokens_details.cached_tokens`` or
  ``prompt_cache_hit_tokens`` (DeepSeek), reasoning tokens as
  ``completion_tokens_details.reasoning_tokens``;
- tool-call fragments of parallel calls interleave; some providers omit
  ``index`` (we fall back to ``id``, and a fragment with neither continues the
  last call), some give every call ``index`` 0 with distinct ids (a new id at a
  known index is a new call), some repeat the id and the function name in every
  fragment (names and ids are assigned, never concatenated); arguments are
  concatenated;
- some put two complete argument objects back to back under one index
  (``{"query": "a"}{"query": "b"}``): they are separate calls, the later ones
  with ids derived from the first (``id_2``, ``id_3``…); a tail that is not a
  complete object stays one call with the readable JSON error;
- any field may be missing, ``null`` or of another type than documented: it
  is ignored.

:class:`StreamAssembler` is fed chunks as they arrive, as plain dicts (the
parsed JSON of each SSE event, see :mod:`botgateway.model.sse`: building the SDK's
objects per chunk cost most of the CPU of streaming), and returns the parts to
show right away; :meth:`StreamAssembler.finish` returns the assembled round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from botgateway.events import Usage

__all__ = [
    "AssembledRound",
    "AssembledToolCall",
    "ReasoningPart",
    "StreamAssembler",
    "StreamPart",
    "TextPart",
    "ThinkTagSplitter",
    "ToolCallFragment",
    "merge_parts",
]

THINK_OPEN = "<think>"
"""Opens an inline reasoning block in the content."""
THINK_CLOSE = "</think>"
"""Closes an inline reasoning block."""


@dataclass(frozen=True)
class TextPart:
    """Visible model text (narration or answer)."""

    text: str
    """New text, to append to what came before in this round."""


@dataclass(frozen=True)
class ReasoningPart:
    """Model reasoning, from a reasoning field or an inline ``<think>`` block."""

    text: str
    """New reasoning text."""


@dataclass(frozen=True)
class ToolCallFragment:
    """A piece of a tool call arrived (the call is assembled by :meth:`StreamAssembler.finish`)."""

    position: int
    """0-based position of the call in this round, in order of first appearance."""
    call_id: str | None
    """The call's id as known so far (``None`` until the provider sent one)."""
    name: str
    """The call's name as known so far."""
    arguments_delta: str
    """The piece of the arguments JSON this fragment carried."""


StreamPart: TypeAlias = TextPart | ReasoningPart | ToolCallFragment
"""What a chunk yields as it arrives."""


def merge_parts(parts: list[StreamPart]) -> list[StreamPart]:
    """``parts`` with each run of text (and of reasoning) joined into one part; tool call fragments as they are.

    The order of what the user sees is kept: text after reasoning stays after it.
    """
    if len(parts) < 2:
        return parts
    merged: list[StreamPart] = []
    for part in parts:
        last = merged[-1] if merged else None
        if isinstance(part, TextPart) and isinstance(last, TextPart):
            merged[-1] = TextPart(last.text + part.text)
        elif isinstance(part, ReasoningPart) and isinstance(last, ReasoningPart):
            merged[-1] = ReasoningPart(last.text + part.text)
        else:
            merged.append(part)
    return merged


@dataclass(frozen=True)
class AssembledToolCall:
    """One complete tool call of a round."""

    call_id: str
    """The provider's id, or ``call_<round>_<n>`` when it sent none."""
    name: str
    """The function name (assigned, never concatenated)."""
    arguments_json: str
    """The concatenated arguments text exactly as the model sent it."""
    arguments: dict[str, Any]
    """Parsed arguments; empty when they were not a valid JSON object."""
    parse_error: str | None = None
    """Why ``arguments_json`` is not a valid JSON object, or ``None``."""

    @property
    def valid_arguments_json(self) -> str:
        """Arguments safe to send back in history: the model's JSON, or ``{}`` when it was malformed."""
        if self.parse_error is not None:
            return "{}"
        return self.arguments_json.strip() or "{}"


@dataclass(frozen=True)
class AssembledRound:
    """Everything one streamed completion produced."""

    text: str
    """Visible text (thought removed)."""
    reasoning: str
    """Reasoning text (from reasoning fields and ``<think>`` blocks)."""
    tool_calls: tuple[AssembledToolCall, ...]
    """Tool calls in order of first appearance."""
    usage: Usage | None
    """Usage if the provider reported any."""
    finish_reason: str | None
    """The last ``finish_reason`` seen (``stop``, ``tool_calls``, ``length``…)."""
    model: str = ""
    """The model the provider says answered (the chunks' ``model``); empty when it did not say."""


class ThinkTagSplitter:
    """Splits content into answer and thought at ``<think>``/``</think>``, even when tags straddle chunks.

    Text that might be the start of a tag is held back until the next piece
    decides it. Whitespace right after a closing tag is dropped, since models put
    blank lines between the thought and the answer.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._in_think = False
        self._strip_leading = False

    def feed(self, text: str) -> list[StreamPart]:
        """Split ``text``; returns the parts that are certain so far."""
        if not self._buffer and not self._in_think and not self._strip_leading and "<" not in text:
            return [TextPart(text)]  # the common case: plain answer text, no tag and no start of one
        self._buffer += text
        parts: list[StreamPart] = []
        while self._buffer:
            tag = THINK_CLOSE if self._in_think else THINK_OPEN
            at = self._buffer.find(tag)
            if at >= 0:
                self._emit(parts, self._buffer[:at])
                self._buffer = self._buffer[at + len(tag) :]
                self._in_think = not self._in_think
                self._strip_leading = not self._in_think
                continue
            keep = _partial_suffix(self._buffer, tag)
            self._emit(parts, self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            break
        return parts

    def flush(self) -> list[StreamPart]:
        """The held-back text at the end of the stream (a half tag is plain text)."""
        parts: list[StreamPart] = []
        self._emit(parts, self._buffer)
        self._buffer = ""
        return parts

    def _emit(self, parts: list[StreamPart], text: str) -> None:
        if not self._in_think and self._strip_leading:
            text = text.lstrip()
            if text:
                self._strip_leading = False
        if not text:
            return
        part_type = ReasoningPart if self._in_think else TextPart
        if parts and isinstance(parts[-1], part_type):
            parts[-1] = part_type(parts[-1].text + text)
        else:
            parts.append(part_type(text))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


@dataclass
class _Call:
    position: int
    call_id: str | None = None
    index: int | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def joined(self) -> str:
        return "".join(self.arguments)


def _nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _usage_from(raw: Any) -> Usage | None:
    """The round's :class:`Usage` from a ``usage`` object; ``None`` when it is none.

    Cached prompt tokens are ``prompt_tokens_details.cached_tokens`` (OpenAI and
    most compatible services), ``prompt_cache_hit_tokens`` (DeepSeek) or a bare
    ``cached_tokens`` (Moonshot); reasoning tokens are
    ``completion_tokens_details.reasoning_tokens``. Each is a part of its total, never more.
    """
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if prompt is None and completion is None:
        return None
    try:
        prompt_tokens, completion_tokens = int(prompt or 0), int(completion or 0)
    except (TypeError, ValueError):
        return None  # counts that are not numbers: usage is optional, the answer is not
    prompt_details, completion_details = raw.get("prompt_tokens_details"), raw.get("completion_tokens_details")
    cached = _count(
        prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None,
        raw.get("prompt_cache_hit_tokens"),
        raw.get("cached_tokens"),
    )
    reasoning = _count(
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None,
        raw.get("reasoning_tokens"),
    )
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=min(cached, prompt_tokens),
        reasoning_tokens=min(reasoning, completion_tokens),
    )


def _count(*candidates: Any) -> int:
    """The first candidate that is a whole number of tokens (0 when none is): details are optional."""
    for value in candidates:
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return 0


class StreamAssembler:
    """Folds the chunks of one streamed completion; see the module docstring for the quirks handled."""

    def __init__(self, round: int = 1) -> None:
        self.round = round
        """1-based round number, used for ids assigned to calls that came without one."""
        self._splitter = ThinkTagSplitter()
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self._model = ""
        self.chunks = 0
        """Chunks fed so far."""

    @property
    def text(self) -> str:
        """Visible text so far (the partial answer if the stream breaks)."""
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        """Reasoning so far."""
        return "".join(self._reasoning)

    def feed(self, chunk: Mapping[str, Any]) -> list[StreamPart]:
        """Fold one chunk, the parsed JSON of a ``chat.completion.chunk``; returns what it added, in stream order.

        Any field may be missing, ``null`` or of the wrong type (providers vary); such a field is ignored.
        """
        self.chunks += 1
        parts: list[StreamPart] = []
        self._take_usage(chunk.get("usage"))
        if not self._model:
            self._model = _nonempty(chunk.get("model")) or ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or (choice.get("index") or 0) != 0:
                continue  # n > 1 is never requested; ignore stray alternatives
            self._take_usage(choice.get("usage"))  # Moonshot reports usage inside the final choice
            finish_reason = choice.get("finish_reason")
            if finish_reason and isinstance(finish_reason, str):
                self._finish_reason = finish_reason
            delta = choice.get("delta")
            if isinstance(delta, dict):
                parts.extend(self._fold_delta(delta))
        if parts:
            self._record(parts)
        return parts

    def _take_usage(self, raw: Any) -> None:
        """Keep ``raw`` as the round's usage when it is one (the last report wins: some are cumulative)."""
        if raw is not None:
            usage = _usage_from(raw)
            if usage is not None:
                self._usage = usage

    def finish(self) -> AssembledRound:
        """Flush held-back text and assemble the tool calls."""
        tail = self._splitter.flush()
        self._record(tail)
        calls: list[AssembledToolCall] = []
        taken: set[str] = set()
        for n, call in enumerate(self._calls, start=1):
            if not call.name and not call.joined().strip():
                continue  # a phantom fragment carrying nothing
            # Missing ids get stable ones; a reused id gets a suffix so each result matches one call.
            call_id = self._claim(call.call_id or f"call_{self.round}_{n}", call.call_id, taken)
            pieces = _split_objects(call.joined())
            if pieces is None:
                calls.append(_assemble(call_id, call.name, call.joined()))
                continue
            calls.append(_assemble(call_id, call.name, pieces[0]))
            k = 1
            for piece in pieces[1:]:
                k += 1
                while f"{call_id}_{k}" in taken or f"{call_id}_{k}" in self._by_id:
                    k += 1  # the next free number, so the ids of one call stay a sequence
                taken.add(f"{call_id}_{k}")
                calls.append(_assemble(f"{call_id}_{k}", call.name, piece))
        return AssembledRound(
            text=self.text,
            reasoning=self.reasoning,
            tool_calls=tuple(calls),
            usage=self._usage,
            finish_reason=self._finish_reason,
            model=self._model,
        )

    def _claim(self, call_id: str, own: str | None, taken: set[str]) -> str:
        """``call_id``, or it with a suffix when a call of this round already has it; ``own`` is the call's own provider id."""
        unique, k = call_id, 1
        while unique in taken or (unique != own and unique in self._by_id):
            k += 1
            unique = f"{call_id}_{k}"
        taken.add(unique)
        return unique

    def _record(self, parts: list[StreamPart]) -> None:
        for part in parts:
            if isinstance(part, TextPart):
                self._text.append(part.text)
            elif isinstance(part, ReasoningPart):
                self._reasoning.append(part.text)

    def _fold_delta(self, delta: dict[str, Any]) -> list[StreamPart]:
        parts: list[StreamPart] = []
        reasoning = _nonempty(delta.get("reasoning_content")) or _nonempty(delta.get("reasoning"))
        if reasoning:
            parts.append(ReasoningPart(reasoning))
        content = _nonempty(delta.get("content"))
        if content:
            parts.extend(self._splitter.feed(content))
        refusal = _nonempty(delta.get("refusal"))
        if refusal:
            parts.extend(self._splitter.feed(refusal))
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for fragment in tool_calls:
                if isinstance(fragment, dict):
                    parts.append(self._fold_tool_fragment(fragment))
        return parts

    def _fold_tool_fragment(self, fragment: dict[str, Any]) -> ToolCallFragment:
        index = fragment.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else None
        call_id = _nonempty(fragment.get("id"))
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        name = _nonempty(function.get("name"))
        arguments = function.get("arguments")

        call: _Call | None
        same_id = self._by_id.get(call_id) if call_id is not None else None
        if same_id is not None and index is not None and same_id.index is not None and same_id.index != index:
            # A provider reusing one id for parallel calls at different indexes: the index decides.
            call = self._by_index.get(index) or self._new_call()
        elif same_id is not None:
            call = same_id  # id repeated in every fragment
        elif call_id is not None:
            known = self._by_index.get(index) if index is not None else None
            # A new id at a known index is a new call (every call at index 0), unless
            # the call there has no id yet (its id came after its first fragment).
            call = known if known is not None and known.call_id is None else self._new_call()
        elif index is not None:
            call = self._by_index.get(index) or self._new_call()
        else:
            call = self._calls[-1] if self._calls else self._new_call()

        if call_id is not None and call.call_id is None:
            call.call_id = call_id
            self._by_id.setdefault(call_id, call)
        if index is not None:
            self._by_index[index] = call
            if call.index is None:
                call.index = index
        if name is not None:
            call.name = name  # assigned: some providers repeat it in every fragment
        piece = arguments if isinstance(arguments, str) else ""
        if piece and _is_resend(call, piece):
            piece = ""
        if piece:
            call.arguments.append(piece)
        return ToolCallFragment(call.position, call.call_id, call.name, piece)

    def _new_call(self) -> _Call:
        call = _Call(position=len(self._calls))
        self._calls.append(call)
        return call


def _is_resend(call: _Call, piece: str) -> bool:
    """True when a provider re-sends the complete arguments after streaming them (seen on some gateways)."""
    so_far = call.joined()
    if not so_far or piece != so_far:
        return False
    try:
        json.loads(so_far)
    except ValueError:
        return False
    return True


_DECODER = json.JSONDecoder()


def _split_objects(raw: str) -> list[str] | None:
    """The texts of two or more complete JSON objects sent back to back; ``None`` when ``raw`` is not exactly that."""
    text = raw.strip()
    if not text.startswith("{"):
        return None
    pieces: list[str] = []
    at = 0
    while at < len(text):
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, dict):
            return None
        pieces.append(text[at:end])
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
    return pieces if len(pieces) > 1 else None


def _assemble(call_id: str, name: str, raw: str) -> AssembledToolCall:
    text = raw.strip()
    if not text:
        return AssembledToolCall(call_id, name, raw, {})
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        return AssembledToolCall(call_id, name, raw, {}, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})")
    if not isinstance(parsed, dict):
        return AssembledToolCall(call_id, name, raw, {}, "arguments must be a JSON object")
    return AssembledToolCall(call_id, name, raw, parsed)
