"""The fake DingTalk's robot messages: ``groupMessages/send``, ``oToMessages/batchSend`` and session webhooks.

:class:`SentMessage` is one message the robot sent. :class:`DingTalkRobot` is
the part of :class:`~tests.fakes.dingtalk.FakeDingTalk` that takes the robot's
sends (markdown, text, or an image that must name an uploaded ``media_id`` or a
URL), skips staff outside the app's range like DingTalk, answers an expired
session webhook with its errcode, and keeps every message sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.fakes.dingtalk_calls import Call

__all__ = ["DingTalkRobot", "SentMessage"]


@dataclass
class SentMessage:
    """A markdown (or text, or image) message the robot sent."""

    via: Literal["webhook", "group", "oto"]
    chat: str
    """Conversation id (webhook/group) or the comma-joined user ids (oto)."""
    msg_key: str
    title: str
    text: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when it was accepted."""

    @property
    def photo_url(self) -> str:
        """The ``photoURL`` of an image message (``sampleImageMsg``): a ``media_id`` or a URL; empty for others."""
        if self.msg_key != "sampleImageMsg":
            return ""
        return str(json.loads(self.body.get("msgParam") or "{}").get("photoURL", ""))


class DingTalkRobot:
    """Robot sends and session webhooks (a mixin of :class:`~tests.fakes.dingtalk.FakeDingTalk`)."""

    base_url: str
    calls: list[Call]
    messages: list[SentMessage]
    media: dict[str, Any]
    expired_sessions: set[str]
    invalid_staff: set[str]
    _begin: Callable[..., Awaitable[tuple[Call, web.Response | None]]]
    _bad_request: Callable[[Call, dict[str, Any]], Awaitable[web.Response]]
    _notify: Callable[[], Awaitable[None]]
    _tell_watchers: Callable[[Any, str], None]

    def session_webhook(self, conversation_id: str) -> str:
        """The session webhook URL the fake hands out for ``conversation_id``."""
        return f"{self.base_url}/robot/sendBySession?session={conversation_id}"

    def image_messages(self) -> list[SentMessage]:
        """The robot's image messages (``sampleImageMsg``), in order."""
        return [m for m in self.messages if m.msg_key == "sampleImageMsg"]

    @staticmethod
    def _markdown(msg_key: str, params: dict[str, Any]) -> tuple[str, str]:
        if msg_key == "sampleMarkdown":
            return str(params.get("title", "")), str(params.get("text", ""))
        return "", str(params.get("content", ""))

    def _bad_image(self, msg_key: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Why an image message cannot be shown (its ``photoURL`` is no uploaded media id nor a URL), else None."""
        if msg_key != "sampleImageMsg":
            return None
        photo = str(params.get("photoURL") or "")
        if photo in self.media or photo.startswith(("http://", "https://")):
            return None
        return {"code": "invalidParameter", "message": f"photoURL is not a known mediaId or URL: {photo[:40]!r}"}

    async def _group_send(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=False)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        if not body.get("robotCode") or not body.get("openConversationId") or not body.get("msgKey"):
            call.status = 400
            return web.json_response({"code": "invalidParameter", "message": "robotCode, openConversationId and msgKey are required"}, status=400)
        params = json.loads(body.get("msgParam") or "{}")
        refused = self._bad_image(body["msgKey"], params)
        if refused is not None:
            return await self._bad_request(call, refused)
        title, text = self._markdown(body["msgKey"], params)
        self.messages.append(SentMessage("group", body["openConversationId"], body["msgKey"], title, text, body))
        self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"processQueryKey": f"q{len(self.messages)}"})

    async def _oto_send(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=False)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        if not body.get("robotCode") or not body.get("userIds") or not body.get("msgKey"):
            call.status = 400
            return web.json_response({"code": "invalidParameter", "message": "robotCode, userIds and msgKey are required"}, status=400)
        params = json.loads(body.get("msgParam") or "{}")
        refused = self._bad_image(body["msgKey"], params)
        if refused is not None:
            return await self._bad_request(call, refused)
        title, text = self._markdown(body["msgKey"], params)
        invalid = [u for u in body["userIds"] if u in self.invalid_staff]
        valid = [u for u in body["userIds"] if u not in self.invalid_staff]
        if valid:
            self.messages.append(SentMessage("oto", ",".join(valid), body["msgKey"], title, text, body))
            self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"processQueryKey": f"q{len(self.messages)}", "invalidStaffIdList": invalid, "flowControlledStaffIdList": []})

    async def _session_webhook(self, request: web.Request) -> web.Response:
        body = await request.json()
        session = request.query.get("session", "")
        call = Call("POST", request.path, body, time.monotonic(), 200)
        self.calls.append(call)
        if session in self.expired_sessions:
            await self._notify()
            return web.json_response({"errcode": 300001, "errmsg": "session webhook expired"})
        msgtype = body.get("msgtype")
        if msgtype == "markdown":
            title, text = body["markdown"].get("title", ""), body["markdown"].get("text", "")
        elif msgtype == "text":
            title, text = "", body["text"].get("content", "")
        else:
            return web.json_response({"errcode": 40035, "errmsg": "unsupported msgtype"})
        self.messages.append(SentMessage("webhook", session, msgtype, title, text, body))
        self._tell_watchers(self.messages[-1], "message")
        await self._notify()
        return web.json_response({"errcode": 0, "errmsg": "ok"})
