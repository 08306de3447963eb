"""Votes on answers: 👍 / 👎 on a final card, a 👎's optional reason, stored with what the answer used.

Each final answer carries 👍 and 👎 (Slack's feedback buttons or Block Kit
buttons, DingTalk card buttons). A press is :meth:`FeedbackDesk.vote`: stored
in the Store as a :class:`~botgateway.stores.base.FeedbackRecord` with the
answer's question, model, tools and sources (from its record,
:mod:`botgateway.answers.book`), one per voter and answer: a second press changes
the vote (and a changed vote drops the reason it had). A 👎 may say why in
one line: Slack asks in a modal (:meth:`FeedbackDesk.reason`), DingTalk asks
the voter, in their direct chat with the bot, to reply there ``reason <text>`` /
``原因 <text>`` within :data:`REASON_WINDOW_S`, which admission hands to
:meth:`FeedbackDesk.typed_reason`.
Admins read the votes with ``botgateway feedback``.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Literal, Protocol, TypeAlias

import structlog

from botgateway.answers.book import Answer, AnswerBook
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.redaction import redact_text
from botgateway.stores.base import DocumentStore, FeedbackRecord, FeedbackStore
from botgateway.strings import t

__all__ = [
    "MAX_REASON_CHARS", "REASON_WINDOW_S", "FeedbackDesk", "Vote", "VoteStore", "parse_reason", "parse_vote",
]

log = structlog.get_logger(__name__)

Vote: TypeAlias = Literal["up", "down"]
"""👍 or 👎."""

REASON_WINDOW_S = 600.0
"""How long after a 👎 on DingTalk a ``reason <text>`` reply is taken as its reason."""

MAX_REASON_CHARS = 300
"""A reason is one line of at most this many characters (longer ones are cut)."""

_REASON = re.compile(r"^\s*(?:reason|原因)(?:\s*[:：]|\s)\s*(?P<text>\S.*)$", re.IGNORECASE | re.DOTALL)
"""``reason`` / ``原因``, a separator (a colon or a space: "原因是什么？" is a question) and the reason."""


def parse_reason(text: str) -> str | None:
    """The reason in a ``reason <text>`` / ``原因 <text>`` / ``原因：<text>`` reply, or None when ``text`` is not one."""
    match = _REASON.match(text)
    if match is None:
        return None
    return one_line(match.group("text"))


def parse_vote(value: str) -> tuple[Vote, str] | None:
    """``up:<turn id>`` / ``down:<turn id>`` (a button's value) as the vote and the turn; None when malformed."""
    vote, _, turn_id = value.partition(":")
    if vote not in ("up", "down") or not turn_id:
        return None
    return ("up" if vote == "up" else "down"), turn_id


def one_line(text: str) -> str:
    """``text`` as one line of at most :data:`MAX_REASON_CHARS` characters, secrets masked."""
    line = " ".join(redact_text(text).split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1] + "…"


def _pending_key(voter: str) -> str:
    """Where a DingTalk 👎 waits for its reason: one per voter, the newest wins."""
    return f"feedback-reason:{voter}"


def _in_direct_chat(msg: InboundMessage, platform: str) -> bool:
    """Whether ``msg`` was sent in its sender's direct chat with the bot on ``platform``, where a 👎 asks its reason."""
    return msg.platform == platform and not msg.target.is_group and not msg.ctx.is_group


class VoteStore(FeedbackStore, DocumentStore, Protocol):
    """The part of the Store the votes live in: the votes, and the documents a 👎 waits for its reason in."""


class FeedbackDesk:
    """Records votes and reasons in the Store, with what the answer used.

    Args:
        store: Where the votes are kept.
        answers: The answers on record (their question, model, tools and sources).
        clock: Wall clock in Unix seconds.
    """

    def __init__(self, store: VoteStore, answers: AnswerBook, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._answers = answers
        self._clock = clock

    async def vote(self, turn_id: str, voter: Principal, vote: Vote, *, locale: str, ask_reason: bool = False) -> str:
        """Record ``voter``'s ``vote`` on the answer of ``turn_id`` (replacing theirs); the note for the voter.

        ``ask_reason``: a 👎 waits :data:`REASON_WINDOW_S` for a typed ``reason <text>`` (the note says so).
        """
        try:
            previous = await self._store.feedback_vote(turn_id, voter.id)
            answer = await self._answers.get(turn_id)
            reason = previous.reason if previous is not None and previous.vote == vote else ""
            await self._store.record_feedback(self._record(turn_id, voter.id, vote, reason, answer, previous))
            if vote == "down" and ask_reason:
                # The note asking for it goes to the voter's direct chat with the bot: the reason is taken there only.
                pending = {"turn_id": turn_id, "platform": voter.platform, "chat": "direct"}
                await self._store.put_document(_pending_key(voter.id), pending, REASON_WINDOW_S)
        except Exception as exc:
            log.warning("feedback.not_recorded", turn_id=turn_id, voter=voter.id, error=type(exc).__name__)
            return t(locale, "feedback_failed")
        log.info("feedback.vote", turn_id=turn_id, voter=voter.id, vote=vote, changed=previous is not None)
        if vote == "down" and ask_reason:
            return t(locale, "feedback_reason_prompt", minutes=round(REASON_WINDOW_S / 60))
        return t(locale, "feedback_thanks")

    async def reason(self, turn_id: str, voter: Principal, reason: str, *, locale: str) -> str:
        """Keep ``reason`` (one line) with ``voter``'s 👎 on the answer of ``turn_id``; the note for the voter.

        A reason without a 👎 on record (its write failed) records the 👎 with it.
        """
        try:
            previous = await self._store.feedback_vote(turn_id, voter.id)
            answer = await self._answers.get(turn_id) if previous is None else None
            record = self._record(turn_id, voter.id, "down", one_line(reason), answer, previous)
            await self._store.record_feedback(record)
        except Exception as exc:
            log.warning("feedback.reason_not_recorded", turn_id=turn_id, voter=voter.id, error=type(exc).__name__)
            return t(locale, "feedback_failed")
        log.info("feedback.reason", turn_id=turn_id, voter=voter.id)
        return t(locale, "feedback_reason_thanks")

    async def typed_reason(self, msg: InboundMessage) -> str | None:
        """The note when ``msg`` is a ``reason <text>`` reply to its sender's recent 👎 (now recorded), else None.

        The reply counts in the sender's direct chat with the bot only (where the 👎's note asked for it), once: the
        👎 stops waiting when its reason is recorded. Anywhere else, later, or without a 👎 waiting for a reason,
        such a message is a question like any other.
        """
        text = parse_reason(msg.text)
        if text is None:
            return None
        voter = msg.asker
        key = _pending_key(voter.id)
        try:
            pending = await self._store.get_document(key) or {}
        except Exception as exc:
            log.warning("feedback.pending_unreadable", voter=voter.id, error=type(exc).__name__)
            return None
        turn_id = str(pending.get("turn_id") or "")
        if not turn_id or not _in_direct_chat(msg, str(pending.get("platform") or "")):
            return None
        note = await self.reason(turn_id, voter, text, locale=msg.target.locale)
        try:
            # The Store has no delete: written empty and already expired, the key is gone.
            await self._store.put_document(key, {}, 0.0)
        except Exception as exc:  # the reason is kept; another reply within the window would replace it
            log.warning("feedback.pending_not_cleared", voter=voter.id, error=type(exc).__name__)
        return note

    def _record(self, turn_id: str, voter: str, vote: Vote, reason: str, answer: Answer | None,
                previous: FeedbackRecord | None) -> FeedbackRecord:
        """The vote with what its answer used: from the answer's record, else as the vote before it had it."""
        if answer is not None:
            return FeedbackRecord(
                turn_id=turn_id, voter=voter, vote=vote, at=self._clock(), reason=reason, platform=answer.platform,
                channel=answer.channel, asker=answer.asker, question=redact_text(answer.question), model=answer.model,
                tools=answer.tools, sources=answer.sources,
            )
        if previous is not None:
            return dataclasses.replace(previous, vote=vote, at=self._clock(), reason=reason)
        return FeedbackRecord(turn_id=turn_id, voter=voter, vote=vote, at=self._clock(), reason=reason)
