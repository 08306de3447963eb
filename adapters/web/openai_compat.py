"""``POST /v1/chat/completions``: the assistant as an OpenAI-compatible "model", streamed or not.

The last ``user`` message is the question; earlier messages are not sent on
(the conversation's own history is the context). The conversation is the
request's ``user`` field, else the ``X-Conversation`` header, else a new one
per call. Tool progress and the model's thought go out as ``reasoning_content``
(as DeepSeek streams its reasoning), so plain clients show only the text;
text the model writes before calling tools is content too. Usage comes in a
last chunk with ``stream_options.include_usage``. A failed turn is an
``error`` object (in the stream, or as a 4xx/5xx answer: 429 when the asker
reached a limit); closing the connection stops the turn, as "stop" does.
Content and reasoning go out inert (:mod:`adapters.web.inert`); streamed, each
joins into its inert whole, a construct still open at the end held back until
it is complete.

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

from adapters.web.artifact_links import PictureLinks
from adapters.web.auth import principal_of
from adapters.web.body import BadRequest, read_json, text_field
from adapters.web.client_addr import TrustedProxies
from adapters.web.follow import ClientGone, follow
from adapters.web.front import WebFront
from adapters.web.inert import web_inert
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
from botgateway.principal import Principal

__all__ = ["NO_RETRY", "chat_completions_route", "progress_text"]

_STATUS = {"refused": 403, "usage": 400, "timeout": 504, "cancelled": 409}
"""The HTTP status of a failed non-streamed completion, by failure reason (else 502: the model failed)."""

NO_RETRY = {"x-should-retry": "false"}
"""Sent with every failed turn's answer: the OpenAI SDKs then do not ask the whole question again by themselves."""


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


def _question(data: dict[str, Any]) -> str:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    raise BadRequest("'messages' has no message with role 'user'; the last one is the question")


def _content_text(content: Any) -> str:
    if isinstance(content, str) and content.strip():
        return content
    if isinstance(content, list):  # content parts: only the text ones are read
        texts = [part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        text = "\n".join(texts)
        if text.strip():
            return text
    raise BadRequest("the last user message has no text content")


def _usage(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens}


def _error(final: TurnFailed) -> dict[str, Any]:
    return {"error": {"message": final.message, "type": final.reason, "code": final.reason}}


def chat_completions_route(front: WebFront, links: PictureLinks, proxies: TrustedProxies) -> web.RouteDef:
    """The route (relative to the ``/v1`` sub-application); ``links`` writes the links to the turn's pictures,
    which point at the gateway as the client reached it (through ``proxies``)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        data = await read_json(request, front.config.web.max_body_bytes)
        question = _question(data)
        conversation = (text_field(data, "user") or request.headers.get("X-Conversation", "")
                        or front.new_conversation())
        front.checked_conversation(conversation)
        model = text_field(data, "model") or "botgateway"
        options = data.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        msg = front.message(principal, question, conversation, locale_of(request, data))
        tap = EventTap(front.config.web.max_pending_events)
        submission = await front.ask(msg, tap)
        completion = _Completion(f"chatcmpl-{submission.turn_id or front.new_conversation()}", model,
                                 _Pictures(links, principal, public_origin(request, proxies), msg.target.locale))
        if data.get("stream") is True:
            return await completion.stream(request, front, msg, submission, tap, include_usage)
        return await completion.whole(request, front, msg, submission, tap)

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
        self, request: web.Request, front: WebFront, msg: Any, submission: Any, tap: EventTap
    ) -> web.Response:
        reasoning: list[str] = []

        async def write(event: TurnEvent, t: float) -> None:
            self.pictures.note(event)
            reasoning.append(progress_text(event))

        if submission.status in ("started", "queued"):
            try:
                final = await follow(front.stop, msg, submission, tap, request, write)
            except ClientGone:
                return web.Response(status=499)  # nobody reads it
        else:
            final = await note_final(submission, msg.target.locale)
        if isinstance(final, TurnFailed):
            status = 429 if submission.limited else _STATUS.get(final.reason, 502)
            return web.json_response(_error(final), status=status, headers=NO_RETRY)
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

    async def stream(self, request: web.Request, front: WebFront, msg: Any, submission: Any, tap: EventTap,
                     include_usage: bool) -> web.StreamResponse:
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
            if submission.status in ("started", "queued"):
                try:
                    final = await follow(front.stop, msg, submission, tap, request, write)
                except ClientGone:
                    return response
            else:
                final = await note_final(submission, msg.target.locale)
                if isinstance(final, TurnDone) and (text := content.push(final.result.answer)):
                    await send(self.chunk({"content": text}))
            if rest := reasoning.close():
                await send(self.chunk({"reasoning_content": rest}))
            if rest := content.close():
                await send(self.chunk({"content": rest}))
            if isinstance(final, TurnFailed):
                await send(_error(final))
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
