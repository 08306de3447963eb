"""Refresh: an answer's question asked again, with every cache bypassed, by whoever asks for it.

A final answer offers Refresh (a Slack button, a DingTalk card button) and
anyone may type ``refresh`` / ``刷新`` in the conversation. Either way the
answer's question (:mod:`botgateway.answers.book`) is asked again in the same
thread or chat as a new question of the person who asked for it: their
principal and their access decision there, their limits, their audit record,
a new card. Its tool context says ``fresh``, so tools fetch their data now
instead of answering from a cache.

A press names its answer (the button carries the turn id); a typed word
refreshes the conversation's newest answer. :meth:`Refresher.again` turns the
request into that question, which the gateway then admits like any other
(:meth:`botgateway.gateway.Gateway.refresh`, :mod:`botgateway.turns.admission`).
"""

from __future__ import annotations

import dataclasses

import structlog

from botgateway.answers.book import AnswerBook
from botgateway.messages import InboundMessage
from botgateway.strings import t

__all__ = ["REFRESH_WORDS", "Refresher"]

log = structlog.get_logger(__name__)

REFRESH_WORDS = ("refresh", "刷新", "/refresh")
"""A message that is just one of these refreshes the conversation's newest answer."""


class Refresher:
    """Finds the question a Refresh asks again.

    Args:
        answers: The answers on record.
    """

    def __init__(self, answers: AnswerBook) -> None:
        self._answers = answers

    async def again(self, msg: InboundMessage, turn_id: str = "") -> InboundMessage | str:
        """``msg`` (the request, from whoever asked for the Refresh, where they asked) turned into the answer's
        question with caches bypassed; or the note why there is nothing to refresh.

        ``turn_id``: the answer a button named, which must be where the button was pressed; empty: the newest
        answer of ``msg``'s conversation.
        """
        locale = msg.target.locale
        answer = await (self._answers.get(turn_id) if turn_id else self._answers.latest(msg.conversation_id))
        if answer is None:
            return t(locale, "refresh_unknown" if turn_id else "refresh_nothing")
        where = msg.ctx.chat_id or msg.target.chat_id
        if answer.platform != msg.platform or (answer.channel and answer.channel != where):
            # A press that claims a card of another chat refreshes nothing: an answer is refreshed where it is.
            log.warning("refresh.elsewhere", turn_id=answer.turn_id, platform=msg.platform, channel=where)
            return t(locale, "refresh_unknown")
        log.info("refresh.asked", turn_id=answer.turn_id, by=msg.asker.id, typed=not turn_id)
        ctx = dataclasses.replace(msg.ctx, fresh=True)
        return dataclasses.replace(msg, text=answer.question, ctx=ctx, quoted="", quoted_key="")
