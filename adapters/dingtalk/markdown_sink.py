"""Reply-per-turn sink: one robot markdown message when the turn ends.

Used without a card template, while degraded after repeated throttling, and as
the card sink's fallback. The message goes through the conversation's session
webhook while it is valid, else through the robot OpenAPI (group send or 1:1
batch send), so an answer is delivered even when the turn outlived the webhook.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import structlog

from adapters.dingtalk.errors import batch_send_error
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.render import render_reply
from botgateway.budget import RateLimit
from botgateway.cards.render import approval_text
from botgateway.sink import CardGone, CardHandle, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot

__all__ = ["NO_CALL", "SEND_RATE", "WEBHOOK_MARGIN_MS", "ApprovalSync", "DingTalkMarkdownSink", "MarkdownSender"]

log = structlog.get_logger(__name__)

WEBHOOK_MARGIN_MS = 60_000
"""A session webhook this close to its expiry is not used (the call could land after it)."""

SEND_RATE = RateLimit(rate_per_s=20 / 60, burst=10)
"""DingTalk accepts about 20 robot messages per minute in one chat."""

NO_CALL = RateLimit(rate_per_s=1000.0, burst=1000)
"""Operations that make no platform call need no pacing."""


class ApprovalSync(Protocol):
    """The cards a reply's calls waiting for an approval get: :class:`~adapters.dingtalk.card_sink.ApprovalCards`."""

    async def sync(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Deliver a card for each approval new in ``snapshot``; close those no longer waiting."""
        ...


class MarkdownSender:
    """Sends one markdown message to a target: session webhook first, robot OpenAPI after."""

    def __init__(self, api: DingTalkOpenAPI, *, robot_code: str, clock: Callable[[], float] = time.time) -> None:
        self._api = api
        self._robot_code = robot_code
        self._clock = clock

    def rate_key(self, target: CardTarget) -> tuple[str, RateLimit]:
        """The per-chat message budget."""
        return f"dingtalk:{self._robot_code}:send:{target.chat_id}", SEND_RATE

    async def send_private(self, user_id: str, title: str, text: str) -> None:
        """A robot 1:1 message to ``user_id`` (a staff id): what one person alone should read (raises sink errors)."""
        await self._api.send_user_markdown(self._robot_code, [user_id], title, text)

    def _webhook(self, target: CardTarget) -> str | None:
        url = str(target.extra.get("session_webhook") or "")
        expires_ms = int(target.extra.get("session_webhook_expires_ms") or 0)
        if url and self._clock() * 1000 < expires_ms - WEBHOOK_MARGIN_MS:
            return url
        return None

    async def send(self, target: CardTarget, snapshot: CardSnapshot) -> str:
        """Deliver ``snapshot`` as a markdown message; returns the route used (``webhook`` or ``openapi``)."""
        webhook = self._webhook(target)
        if webhook:
            # In groups, "@staffId" plus at.atUserIds makes DingTalk notify the asker.
            mention = f"@{target.user_id}" if target.is_group and target.user_id else ""
            title, text = render_reply(snapshot, is_group=target.is_group, mention=mention)
            body = {"msgtype": "markdown", "markdown": {"title": title, "text": text}}
            if mention:
                body["at"] = {"atUserIds": [target.user_id], "isAtAll": False}
            try:
                await self._api.post_json(webhook, body, what="session webhook reply")
                return "webhook"
            except CardGone as exc:
                log.info("dingtalk.webhook_refused", chat_id=target.chat_id, reason=str(exc))
        title, text = render_reply(snapshot, is_group=target.is_group, asker=target.user_name)
        if target.is_group:
            await self._api.send_group_markdown(self._robot_code, target.chat_id, title, text)
        else:
            answer = await self._api.send_user_markdown(self._robot_code, [target.user_id], title, text)
            # batchSend answers HTTP 200 even when it sent nothing: the lists say who was skipped.
            error = batch_send_error(answer, target.user_id)
            if error is not None:
                raise error
        return "openapi"


class DingTalkMarkdownSink:
    """A :class:`~botgateway.sink.CardSink` that shows nothing while the turn runs and replies once at the end."""

    platform = "dingtalk"

    def __init__(self, sender: MarkdownSender, *, robot_code: str, max_chars: int,
                 approvals: ApprovalSync | None = None) -> None:
        """``approvals`` delivers a card with buttons for each call waiting for an approval (None: a text announcement)."""
        self._approvals = approvals
        self.sender = sender
        """Delivers the message."""
        self.max_chars = max_chars
        """Answer text per message; longer answers continue in another message."""
        self._robot_code = robot_code

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """create/update make no call; finalize and fallback draw from the chat's message budget."""
        if op in ("create", "update"):
            return f"dingtalk:{self._robot_code}:local", NO_CALL
        return self.sender.rate_key(target)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """No message yet: the one reply is sent by :meth:`finalize`."""
        return CardHandle(card_id=f"md-{uuid.uuid4().hex}", target=target, data={"mode": "markdown"})

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Nothing to show until the turn ends, except a call waiting for an approval: that is announced at once.

        An approval cannot wait for the one reply at the end, so each new one goes
        out as its own message (rare, and bounded by ``access.approvals.timeout_s``).
        """
        if self._approvals is not None:
            return await self._approvals.sync(handle, snapshot)
        announced = handle.data.get("approvals", ())
        new = tuple(p for p in snapshot.approvals if p.code not in announced)
        if not new:
            return handle
        note = CardSnapshot(status="done", answer="\n\n".join(approval_text(p, snapshot.locale) for p in new),
                            locale=snapshot.locale, asker=snapshot.asker)
        await self.sender.send(handle.target, note)
        codes = (*announced, *(p.code for p in new))
        return dataclasses.replace(handle, data={**handle.data, "approvals": codes})

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Send the one markdown reply of the turn (or of this part of a long answer)."""
        route = await self.sender.send(handle.target, snapshot)
        log.info("dingtalk.markdown_reply", chat_id=handle.target.chat_id, route=route, status=snapshot.status, part=snapshot.part)
        if self._approvals is not None:
            return await self._approvals.sync(handle, snapshot)  # closes approval cards still open
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Same as finalize: a markdown message."""
        await self.sender.send(target, snapshot)
