"""``POST /v1/chat/completions``: the assistant as an OpenAI-compatible "model", streamed or not.

The last ``user`` message is the question. The conversation is the request's
``user`` field, else the ``X-Conversation`` header: its own history is the
context, and the earlier messages of the request are not read. A request that
names neither (Open WebUI, LibreChat without ``user``, Chatbox) opens a new
conversation whose history is the earlier messages it sent, as data, trimmed
as memory trims (:mod:`adapters.web.client_history`), so a client that keeps
its own chat keeps its context. ``model`` may be anything (it is echoed back;
none is :data:`~adapters.web.models_route.MODEL_ID`). Tool progress and the
model's thought go out as ``reasoning_content`` (as DeepSeek streams its
reasoning), so plain clients show only the text; text the model writes before
calling tools is content too. Usage comes in a last chunk with
``stream_options.include_usage``. A refused question is an HTTP error in
OpenAI's shape (:mod:`adapters.web.api_errors`; 429 with ``Retry-After`` when
the asker reached a limit, 403 for the access policy), streamed or not; a turn
that fails is one too, or, once its stream began, an ``error`` object in the
stream. Closing the connection stops the turn, as "stop" does. Content and
reasoning go out inert (:mod:`adapters.web.inert`); streamed, each joins into
its inert whole, a construct still open at the end held back until it is
complete.

The OpenAI SDKs retry an answer of 409, 429 or 5xx by themselves (twice by
default), which would ask the model the whole question again each time, or
ask again what a limit or a stop just refused: every failed turn's answer says
``x-should-retry: false``, which they obey. The stream sends ``: ping``
comments after ``web.keepalive_s`` of silence.

The turn's pictures (charts its tools drew) end the answer as Markdown image
links to the gateway, one per picture (:mod:`adapters.web.artifact_links`):
signed for the asker's key, so that a browser client loads them without
headers. Streamed, they come in a last content delta before the end.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from adapters.web.api_errors import RATE_LIMITED, BadRequest, error_object
from adapters.web.artifact_links import PictureLinks
from adapters.web.auth import principal_of
from adapters.web.body import read_json, text_field
from adapters.web.client_addr import TrustedProxies
from adapters.web.client_history import client_turns, message_text
from adapters.web.follow import ClientGone, follow
from adapters.web.front import WebFront
from adapters.web.inert import web_inert
from adapters.web.models_route import MODEL_ID
from adapters.web.public_url import public_origin
from adapters.web.routes import locale_of, note_final
from adapters.web.sse import SseStream
from adapters.web.tap import EventTap
from botgateway.artifacts import Artifact
from botgateway.cards.inert_stream import InertStream
from botgateway.events import (
    AnswerDelta,
    ThoughtDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    Usage,
)
from botgateway.messages import Submission
from botgateway.principal import Principal

__all__ = ["BUSY_RETRY_S", "chat_completions_route", "progress_text"]

_STATUS = {"refused": 403, "usage": 400, "timeout": 504, "cancelled": 409}
"""The HTTP status of a failed completion, by failure reason (else 502: the model failed)."""

BUSY_RETRY_S = 10.0
"""The ``Retry-After`` of a refusal by a limit that says no time: a concurrent turns limit frees when one of the
asker's turns ends, which nobody can tell; about a short turn's length."""


def progress_text(event: TurnEvent) -> str:
    """What ``event`` adds to ``reasoning_content``: the thought, and a line per tool call started and finished."""
    if isinstance(event, ThoughtDelta):
        return event.text
    if isinstance(event, ToolCallStarted):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in event.arguments.items())
        return f"\n→ {event.name}({args})\n"
    if isinstance(event, ToolCallFinished):
        mark = "✓" if event.ok else "✗"
        return f"{mark} {event.name}: {event.summary} ({event.duration_s:.1f} s)\n"
    return ""


def _question(data: dict[str, Any]) -> tuple[str, list[Any]]:
    """The question (the last ``user`` message's text) and the messages sent before it."""
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects", param="messages")
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            text = message_text(message.get("content"))
            if not text.strip():
                raise BadRequest("the last user message has no text content", param="messages")
            return text, messages[:index]
    raise BadRequest("'messages' has no message with role 'user'; the last one is the question", param="messages")


def _usage(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def _failure(final: TurnFailed, submission: Submission) -> BadRequest:
    """How a failed turn (or a refused question) is answered: 429 for a limit, else by its reason."""
    if submission.limited:
        wait_s = submission.retry_after_s if submission.retry_after_s is not None else BUSY_RETRY_S
        return BadRequest(final.message, 429, code=RATE_LIMITED, retry_after_s=wait_s)
    return BadRequest(final.message, _STATUS.get(final.reason, 502), code=final.reason)


def _conversation(request: web.Request, data: dict[str, Any], front: WebFront) -> str:
    """The conversation the request names (``user``, else ``X-Conversation``), checked; "" when it names none."""
    named = text_field(data, "user")
    conversation, param = (named, "user") if named else (request.headers.get("X-Conversation", ""), "X-Conversation")
    if not conversation:
        return ""
    try:
        return front.checked_conversation(conversation)
    except BadRequest as exc:
        raise exc.about(param) from None


def chat_completions_route(front: WebFront, links: PictureLinks, proxies: TrustedProxies) -> web.RouteDef:
    """The route (relative to the ``/v1`` sub-application); ``links`` writes the links to the turn's pictures,
    which point at the gateway as the client reached it (through ``proxies``)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        data = await read_json(request, front.config.web.max_body_bytes)
        question, earlier = _question(data)
        named = _conversation(request, data, front)
        model = text_field(data, "model") or MODEL_ID
        options = data.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        msg = front.message(principal, question, named or front.new_conversation(), locale_of(request, data))
        if not named:  # the client keeps the chat: what it sent before is this new conversation's history
            await front.seed_history(msg, client_turns(earlier, front.config.memory.max_history_tokens))
        tap = EventTap(front.config.web.max_pending_events)
        submission = await front.ask(msg, tap)
        final = None
        if submission.status not in ("started", "queued"):  # answered without a turn: a refusal, or a note
            final = await note_final(submission, msg.target.locale)
            if isinstance(final, TurnFailed):
                raise _failure(final, submission)  # before any stream: an HTTP error every client reads
        completion = _Completion(f"chatcmpl-{submission.turn_id or front.new_conversation()}", model,
                                 _Pictures(links, principal, public_origin(request, proxies), msg.target.locale))
        if data.get("stream") is True:
            return await completion.stream(request, front, msg, submission, tap, include_usage, final)
        return await completion.whole(request, front, msg, submission, tap, final)

    return web.post("/chat/completions", handler)


class _Pictures:
    """The pictures of one turn's tool calls, and the Markdown that links to them once it is answered."""

    def __init__(self, links: PictureLinks, asker: Principal, origin: str, locale: str) -> None:
        self._links = links
        self._asker = asker
        self._origin = origin
        self._locale = locale
        self._artifacts: list[Artifact] = []

    def note(self, event: TurnEvent) -> None:
        """Take the pictures of a finished call."""
        if isinstance(event, ToolCallFinished):
            self._artifacts.extend(event.artifacts)

    def markdown(self) -> str:
        """The links (our own Markdown, never made inert), or "" when no tool drew anything."""
        return self._links.markdown(self._artifacts, self._asker, self._origin, self._locale)


class _Completion:
    """One completion's answer, in either form."""

    def __init__(self, completion_id: str, model: str, pictures: _Pictures) -> None:
        self.id = completion_id
        self.model = model
        self.created = int(time.time())
        self.pictures = pictures

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    async def whole(
        self, request: web.Request, front: WebFront, msg: Any, submission: Submission, tap: EventTap,
        final: TurnDone | TurnFailed | None,
    ) -> web.Response:
        """The completion as one JSON answer (``final``: how a question answered without a turn ended)."""
        reasoning: list[str] = []

        async def write(event: TurnEvent, t: float) -> None:
            self.pictures.note(event)
            reasoning.append(progress_text(event))

        if final is None:
            try:
                final = await follow(front.stop, msg, submission, tap, request, write)
            except ClientGone:
                return web.Response(status=499)  # nobody reads it
        if isinstance(final, TurnFailed):
            raise _failure(final, submission)
        inert = web_inert(msg.target.locale)
        content = "\n\n".join(part for part in (inert(final.result.answer), self.pictures.markdown()) if part)
        message = {"role": "assistant", "content": content}
        if "".join(reasoning).strip():
            message["reasoning_content"] = inert("".join(reasoning).strip())
        return web.json_response({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": _usage(final.result.usage),
        })

    async def stream(self, request: web.Request, front: WebFront, msg: Any, submission: Submission, tap: EventTap,
                     include_usage: bool, final: TurnDone | TurnFailed | None) -> web.StreamResponse:
        """The completion as ``chat.completion.chunk`` events (``final``: how a question answered without a turn
        ended); a turn that fails once they began ends with an ``error`` object."""
        stream = await SseStream.open(request, ping_s=front.config.web.keepalive_s)
        response = stream.response

        async def send(data: dict[str, Any] | str) -> None:
            text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
            await stream.write(f"data: {text}\n\n".encode())

        inert = web_inert(msg.target.locale)
        content, reasoning = InertStream(inert), InertStream(inert)

        async def write(event: TurnEvent, t: float) -> None:
            self.pictures.note(event)
            if isinstance(event, AnswerDelta):
                if text := content.push(event.text):
                    await send(self.chunk({"content": text}))
            elif isinstance(event, TurnDone | TurnFailed):
                return  # the ending is sent below, once
            elif text := reasoning.push(progress_text(event)):
                await send(self.chunk({"reasoning_content": text}))

        async with stream:
            await send(self.chunk({"role": "assistant", "content": ""}))
            if final is None:
                try:
                    final = await follow(front.stop, msg, submission, tap, request, write)
                except ClientGone:
                    return response
            elif isinstance(final, TurnDone) and (text := content.push(final.result.answer)):
                await send(self.chunk({"content": text}))
            if rest := reasoning.close():
                await send(self.chunk({"reasoning_content": rest}))
            if rest := content.close():
                await send(self.chunk({"content": rest}))
            if isinstance(final, TurnFailed):
                failure = _failure(final, submission)
                await send({"error": error_object(failure.message, failure.status, code=failure.code)})
            else:
                if links := self.pictures.markdown():
                    await send(self.chunk({"content": f"\n\n{links}"}))
                await send(self.chunk({}, "stop"))
                if include_usage:
                    await send({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                "model": self.model, "choices": [], "usage": _usage(final.result.usage)})
            await send("[DONE]")
            await stream.close()
        return response
