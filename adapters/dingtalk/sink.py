"""The adapter's one :class:`~botgateway.sink.CardSink`: routes each card to the AI card or the markdown reply.

The adapter decides the mode of a turn when the message arrives (a card when
a template is configured and the app is not degraded) and writes it into
``CardTarget.extra["mode"]``. Because the mode travels with the target, a card
recorded in the Store is finalized the right way after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from adapters.dingtalk.card_sink import ApprovalCards, DingTalkCardSink
from adapters.dingtalk.inert import dingtalk_inert
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.budget import RateLimit
from botgateway.config import DingTalkConfig
from botgateway.sink import CardHandle, CardOp, CardSink, CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

__all__ = ["DingTalkSink"]


class DingTalkSink:
    """Dispatches to the card sink (``extra["mode"] == "card"``) or the markdown sink."""

    platform = "dingtalk"

    def __init__(self, markdown: DingTalkMarkdownSink, card: DingTalkCardSink | None = None) -> None:
        self.markdown = markdown
        """Reply-per-turn sink."""
        self.card = card
        """AI card sink, or None without a template."""
        self.max_chars = min(markdown.max_chars, card.max_chars) if card else markdown.max_chars
        """Answer text per card or message."""

    @classmethod
    def from_config(
        cls,
        config: DingTalkConfig,
        api: DingTalkOpenAPI,
        *,
        robot_code: str,
        monitor: ThrottleMonitor,
        clock: Callable[[], float] = time.time,
    ) -> DingTalkSink:
        """The markdown sink, and the AI card sink when ``config`` names a card template."""
        sender = MarkdownSender(api, robot_code=robot_code, clock=clock)
        approvals = None
        if config.approval_template_id:
            approvals = ApprovalCards(api, template_id=config.approval_template_id, robot_code=robot_code)
        markdown = DingTalkMarkdownSink(sender, robot_code=robot_code, max_chars=config.max_card_chars, approvals=approvals)
        card = None
        if config.card_template_id:
            card = DingTalkCardSink(
                api,
                template_id=config.card_template_id,
                robot_code=robot_code,
                content_key=config.card_content_key,
                qps=config.qps,
                max_chars=config.max_card_chars,
                sender=sender,
                monitor=monitor,
                approvals=approvals,
                answer_buttons=config.answer_buttons,
            )
        return cls(markdown, card)

    def pick(self, target: CardTarget, card_id: str = "") -> CardSink:
        """The sink that serves ``target`` (or the existing card ``card_id``)."""
        if card_id:
            # Card ids carry their mode, in case a stored target lost its extras.
            return self.markdown if card_id.startswith("md-") or self.card is None else self.card
        if target.extra.get("mode") == "card" and self.card is not None:
            return self.card
        return self.markdown

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The bucket of the sink serving ``target``."""
        return self.pick(target).rate_key(op, target)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Create the card (or prepare the markdown reply)."""
        return await self.pick(target).create(target, snapshot)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Stream ``snapshot`` into the card (no-op for markdown replies)."""
        return await self.pick(handle.target, handle.card_id).update(handle, snapshot)

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Finalize the card, or send the markdown reply."""
        return await self.pick(handle.target, handle.card_id).finalize(handle, snapshot)

    async def private_note(self, target: CardTarget, user_id: str, text: str) -> bool:
        """In a group, a robot 1:1 message to ``user_id``; False in a 1:1 chat (a note there is private already)."""
        if not target.is_group:
            return False
        title = t(target.locale, "reply_title")
        await self.markdown.sender.send_private(user_id, title, dingtalk_inert(text, target.locale))
        return True

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Post ``snapshot`` as a markdown message."""
        await self.pick(target).fallback(target, snapshot)
