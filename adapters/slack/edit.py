"""Edit mode: a placeholder ``chat.postMessage``, then ``chat.update``; and the plain messages of a fallback.

An edit-mode card is one ``markdown`` block with a plain ``text`` fallback and,
while live, a Stop button (a card with a preamble shows it in a block of its
own above the body); a final answer carries Refresh and 👍 / 👎 instead. A
stream that broke keeps its message: from then on
that message is edited (:meth:`EditMessages.converted` remembers which one, so
a stream that rolled over and then broke edits its current message). A
fallback posts the final answer as new thread messages, split only where Slack
would refuse one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

import structlog
from cachetools import LRUCache

from adapters.slack.errors import call_slack
from adapters.slack.handles import MessageKey, as_edit, message_key
from adapters.slack.inert import allowed_mentions
from adapters.slack.render import (
    MAX_MARKDOWN_CHARS,
    answer_buttons,
    card_blocks,
    card_markdown,
    card_text,
    escape_text,
    markdown_chars,
    preamble_blocks,
)
from botgateway.answers import offers_answer_controls
from botgateway.cards.split import split_parts
from botgateway.sink import CardHandle, CardTarget, TooLong
from botgateway.snapshot import CardSnapshot

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig

__all__ = ["EditMessages", "post_ephemeral"]

log = structlog.get_logger(__name__)

_MAX_CONVERTED = 10_000
"""Broken streams whose edited message is remembered at most."""


async def post_ephemeral(client: AsyncWebClient, *, channel: str, user: str, text: str, thread_ts: str | None = None) -> bool:
    """A message only ``user`` sees (``chat.postEphemeral``); False when Slack would not take it (logged)."""
    if not channel or not user:
        return False
    try:
        await call_slack(client.chat_postEphemeral, channel=channel, user=user, text=escape_text(text), thread_ts=thread_ts)
    except Exception as exc:
        log.warning("slack.ephemeral_failed", error=str(exc) or type(exc).__name__)
        return False
    return True


class EditMessages:
    """Posts, edits and falls back with plain Slack messages; Slack's errors come back typed."""

    def __init__(self, client: AsyncWebClient, config: SlackConfig) -> None:
        self._client = client
        self._config = config
        self._converted: LRUCache[MessageKey, CardHandle] = LRUCache(_MAX_CONVERTED)

    async def post(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Post the card's first message (the placeholder) in ``target``'s thread."""
        response = await call_slack(
            self._client.chat_postMessage,
            channel=target.chat_id,
            thread_ts=target.thread_id,
            text=card_text(snapshot, allowed_mentions(target)),
            blocks=self._blocks(target, snapshot),
            unfurl_links=False,
            unfurl_media=False,
        )
        ts = str(response["ts"])
        channel = str(response.get("channel") or target.chat_id)
        return CardHandle(card_id=ts, target=target, data={"mode": "edit", "channel": channel, "ts": ts})

    async def edit(self, handle: CardHandle, snapshot: CardSnapshot) -> None:
        """Replace the message of edit-mode ``handle`` with ``snapshot``."""
        await call_slack(
            self._client.chat_update,
            channel=handle.data.get("channel") or handle.target.chat_id,
            ts=handle.data.get("ts") or handle.card_id,
            text=card_text(snapshot, allowed_mentions(handle.target)),
            blocks=self._blocks(handle.target, snapshot),
        )

    async def post_plain(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Post ``snapshot`` as new thread message(s), split when long; a preamble heads the first, and a final
        answer's Refresh and 👍 / 👎 end the last (no other button: nothing is live any more)."""
        final = dataclasses.replace(snapshot, status=snapshot.status if snapshot.final else "done")
        allowed = allowed_mentions(target)
        body = card_markdown(final, allowed)
        # The streamer already cut the answer to size; split only what Slack would refuse (the preamble counts).
        room = MAX_MARKDOWN_CHARS - markdown_chars(preamble_blocks(final))
        parts = split_parts(body, room) if len(body) > room else [body]
        for index, part in enumerate(parts):
            blocks = preamble_blocks(final, divider=bool(part)) if index == 0 else []
            if part or not blocks:
                blocks.append({"type": "markdown", "text": part})
            if index == len(parts) - 1 and offers_answer_controls(snapshot, target):
                blocks.append(answer_buttons(target.turn_id, snapshot.locale))
            text = card_text(dataclasses.replace(final, blocks=(), answer=part, footer="", error="", asker="",
                                                 preamble=final.preamble if index == 0 else ""), allowed)
            await call_slack(
                self._client.chat_postMessage,
                channel=target.chat_id,
                thread_ts=target.thread_id,
                text=text,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
            )

    def shown(self, target: CardTarget, snapshot: CardSnapshot) -> str:
        """A digest of what the card's message shows for ``snapshot`` (text and blocks): an edit to the same is not made."""
        shown = [card_text(snapshot, allowed_mentions(target)), self._blocks(target, snapshot)]
        return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:32]

    def check_size(self, snapshot: CardSnapshot) -> None:
        """Live text is kept under ``max_live_bytes`` (UTF-8), so CJK answers split as early as Latin ones."""
        size = len(snapshot.answer.encode("utf-8"))
        if size > self._config.max_live_bytes:
            raise TooLong(f"the answer part has {size} bytes; the live limit is {self._config.max_live_bytes}")

    def handle_of(self, handle: CardHandle) -> CardHandle:
        """The edit-mode handle of ``handle``'s message (the current message if a stream rolled over, then broke)."""
        return self._converted.get(message_key(handle)) or as_edit(handle)

    def converted(self, handle: CardHandle, edited: CardHandle) -> None:
        """``handle``'s stream broke: its card is edited through ``edited`` from now on."""
        self._converted[message_key(handle)] = edited

    def _blocks(self, target: CardTarget, snapshot: CardSnapshot) -> list[dict[str, Any]]:
        turn_id = target.turn_id if self._config.stop_button else ""
        blocks = card_blocks(snapshot, turn_id=turn_id, allowed=allowed_mentions(target), target=target)
        size = markdown_chars(blocks)  # Slack counts every markdown block of a message together
        if size > MAX_MARKDOWN_CHARS:
            raise TooLong(f"the card has {size} characters; slack takes {MAX_MARKDOWN_CHARS}")
        return blocks
