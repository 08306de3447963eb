"""The adapter's one :class:`~botgateway.sink.CardSink`: routes each card to the AI card or the markdown reply.

The adapter decides the mode of a turn when the message arrives (a card when
a template is configured and the app is not degraded) and writes it into
``CardTarget.extra["mode"]``. Because the mode travels with the target, a card
recorded in the Store is finalized the right way after a restart. The turn's
charts follow the same mode (:class:`~botgateway.sink.ArtifactSink`): an image
message under an AI card, an embedded image in a markdown reply
(:mod:`adapters.dingtalk.pictures`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from adapters.dingtalk.card_sink import ApprovalCards, DingTalkCardSink
from adapters.dingtalk.inert import dingtalk_inert
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.media import MediaUploads
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.pictures import DingTalkPictures
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.config import DingTalkConfig
from botgateway.sink import CallPacer, CardHandle, CardOp, CardSink, CardTarget, PermanentError
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

__all__ = ["DingTalkSink"]


class DingTalkSink:
    """Dispatches to the card sink (``extra["mode"] == "card"``) or the markdown sink."""

    platform = "dingtalk"

    def __init__(self, markdown: DingTalkMarkdownSink, card: DingTalkCardSink | None = None,
                 pictures: DingTalkPictures | None = None) -> None:
        self.markdown = markdown
        """Reply-per-turn sink."""
        self.card = card
        """AI card sink, or None without a template."""
        self.pictures = pictures
        """Delivers the turn's charts, or None (each chart then fails with a note on the card)."""
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
        pacer: CallPacer | None = None,
    ) -> DingTalkSink:
        """The markdown sink, the AI card sink when ``config`` names a card template, and the charts' delivery
        (``pacer``: pays for its calls from the shared budgets)."""
        sender = MarkdownSender(api, robot_code=robot_code, clock=clock)
        pictures = DingTalkPictures(api, MediaUploads(api, oapi_base_url=config.oapi_base_url), messages=sender,
                                    robot_code=robot_code, qps=config.qps, pacer=pacer)
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
        return cls(markdown, card, pictures)

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

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """Upload ``artifact``; under a turn's AI card it goes as an image message into the chat (no embed), in a
        markdown reply it is embedded as ``![title](@media_id)``. ``handle`` is None when no card was made live:
        the turn's mode still says how its answer goes out."""
        if self.pictures is None:
            raise PermanentError("charts are not set up for this DingTalk sink")
        beside_card = self.pick(target, handle.card_id if handle is not None else "") is self.card
        return await self.pictures.ship(target, artifact, beside_card=beside_card)

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
