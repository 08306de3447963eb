"""What adapters hand the gateway, and what the gateway answers.

An adapter parses a platform message into an :class:`InboundMessage` and
calls :meth:`botgateway.gateway.Gateway.submit`, which returns a
:class:`Submission` at once; its ``done`` future resolves to a
:class:`TurnOutcome` once the card is final.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, TypeAlias

from botgateway.cards.metrics import CardMetrics
from botgateway.config import SessionScope
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.snapshot import CardSnapshot
from botgateway.tooling import ToolContext

__all__ = ["InboundMessage", "Submission", "SubmissionStatus", "TurnOutcome", "conversation_key"]

SubmissionStatus: TypeAlias = Literal[
    "started", "queued", "duplicate", "stopped", "refused", "cleared", "whoami", "approval", "feedback"
]


def conversation_key(
    platform: str,
    scope: SessionScope,
    *,
    workspace: str = "",
    chat: str,
    thread: str | None = None,
    user: str = "",
) -> str:
    """The memory and scheduling key of a message, by the adapter's session scope.

    ``thread``: one conversation per thread (a message outside any thread is its
    chat's conversation); ``chat``: one per chat or channel; ``user``: one per
    person within a chat, so colleagues in a group chat do not share history.
    """
    base = f"{platform}:{workspace}:{chat}"
    if scope == "thread":
        return f"{base}:{thread}" if thread else base
    if scope == "user":
        return f"{base}:user:{user}"
    return base


@dataclass(frozen=True)
class InboundMessage:
    """A question (or a stop word) from any adapter, already parsed."""

    platform: str
    """Adapter name: ``slack``, ``dingtalk``, ``terminal``."""
    message_id: str
    """The platform's id of the message (dedupe key); empty disables dedupe."""
    conversation_id: str
    """Our conversation key (see :func:`conversation_key`)."""
    text: str
    """The question, bot mention removed."""
    target: CardTarget
    """Where the answer card goes."""
    ctx: ToolContext
    """Who asked, for tools and permission checks."""
    principal: Principal | None = None
    """The asker's qualified identity, as the adapter knows it (team, external); see :attr:`asker`."""
    quoted: str = ""
    """Text of the message this one quotes or replies to, when the platform says (a DingTalk quote); else empty."""
    quoted_key: str = ""
    """The platform's key of the quoted message, when it gives one: what a posted card's
    :attr:`CardHandle.data` ``quote_key`` holds (a DingTalk card's carrier id); else empty."""

    @property
    def asker(self) -> Principal:
        """The asker's principal: the adapter's, else one derived from the platform and the user id."""
        return self.principal or Principal.of(self.platform, self.ctx.user_id, name=self.ctx.user_name)


@dataclass(frozen=True, kw_only=True)
class TurnOutcome:
    """How a turn's card ended; the result of :attr:`Submission.done`."""

    turn_id: str
    """The turn."""
    outcome: str
    """``done``, ``failed:<reason>``, ``stopped``, ``moved`` (to another process of the fleet) or ``refused``."""
    answer: str = ""
    """The final (or partial) answer text."""
    snapshot: CardSnapshot | None = None
    """The last snapshot the card was given."""
    metrics: CardMetrics | None = None
    """The streamer's per-turn card metrics, when a card was streamed."""


@dataclass(frozen=True, kw_only=True)
class Submission:
    """What :meth:`Gateway.submit` did with a message."""

    status: SubmissionStatus
    """started now, queued behind another turn, duplicate (dropped), stopped (a stop word), refused,
    cleared (a clear word), whoami, approval (an ``approve 4821`` reply), or feedback (a 👎's reason)."""
    turn_id: str
    """The new turn's id (started, queued), the stopped turn's id, or empty."""
    done: asyncio.Future[TurnOutcome] | None = None
    """Resolves once the card is final (or the refusal/stop note delivered); None for duplicates."""
    message: str = ""
    """Plain-words explanation for refused and stopped submissions."""
    position: int = 0
    """Place in the conversation's queue (1 = next) when queued."""
    limited: bool = False
    """Refused because the asker reached one of its limits (turns per minute, concurrent turns, tokens per day):
    the same question may pass later, unlike a refusal of the access policy."""
    retry_after_s: float | None = None
    """For a limit's refusal: seconds until it may pass (None: unknown, as for concurrent turns)."""
