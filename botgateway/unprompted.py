"""Turns nobody typed: an alert's investigation, a scheduled report.

They run through the same gateway as a question (scheduling, cards, budgets,
limits, audit) under the gateway's own principal (``alerts:<route>``,
``schedule:<name>``) and the role their configuration names. What differs is
only where they come from: there is no message to answer, so the card goes to
a channel the adapter describes (:class:`~botgateway.sink.ChannelCards`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.messages import InboundMessage, Submission
from botgateway.principal import Principal
from botgateway.sink import CardSink, CardTarget, ChannelCards
from botgateway.tooling import ToolContext

__all__ = ["Channels", "UnpromptedGateway", "UnpromptedTurn", "gateway_principal"]


def gateway_principal(kind: str, name: str) -> Principal:
    """The principal of the gateway's own turns: ``alerts:<route>``, ``schedule:<name>``."""
    return Principal(id=f"{kind}:{name}", platform=kind, user=name, name=f"{kind}:{name}")


class UnpromptedGateway(Protocol):
    """What :class:`Channels` needs of the gateway (:meth:`botgateway.gateway.Gateway.submit_unprompted`)."""

    async def submit_unprompted(
        self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy, *, role: str,
        tools: frozenset[str] | None = None,
    ) -> Submission:
        """Schedule ``msg`` as ``role``; a refusal comes back as a ``refused`` submission."""
        ...


@dataclass(frozen=True, kw_only=True)
class UnpromptedTurn:
    """One turn nobody typed."""

    principal: Principal
    """Who it runs as (:func:`gateway_principal`)."""
    role: str
    """The access role its configuration names."""
    question: str
    """What the model is asked."""
    conversation_id: str
    """Its memory key (an alert's own conversation, a report slot's)."""
    target: CardTarget
    """Where its card goes (:meth:`Channels.target`)."""
    tools: frozenset[str] | None = None
    """Offer only these tools (an investigation's read-only ones); None: what the role allows."""


class Channels:
    """The adapters that post cards unprompted, and the way a turn nobody typed is asked through the gateway."""

    def __init__(
        self,
        gateway: UnpromptedGateway,
        adapters: Mapping[str, ChannelCards],
        sinks: Mapping[str, CardSink],
        policies: Mapping[str, BufferPolicy],
    ) -> None:
        """``adapters``, ``sinks`` and ``policies`` by platform name (``slack``, ``dingtalk``)."""
        self._gateway = gateway
        self._adapters = dict(adapters)
        self._sinks = dict(sinks)
        self._policies = dict(policies)

    def available(self, platform: str) -> bool:
        """Whether a card can be posted on ``platform`` (its adapter is running here)."""
        return platform in self._adapters and platform in self._sinks

    def adapter(self, platform: str) -> ChannelCards:
        """The running adapter of ``platform`` (``KeyError`` when it is not running)."""
        return self._adapters[platform]

    def sink(self, platform: str) -> CardSink:
        """The card sink of ``platform``'s adapter."""
        return self._sinks[platform]

    def policy(self, platform: str) -> BufferPolicy:
        """The buffer policy ``platform``'s cards stream with."""
        return self._policies.get(platform) or BufferPolicy.from_config()

    def target(self, platform: str, chat_id: str, *, locale: str) -> CardTarget:
        """Where a new card in ``platform``'s channel ``chat_id`` goes."""
        return self._adapters[platform].channel_target(chat_id, locale=locale)

    async def ask(self, turn: UnpromptedTurn, *, sink: CardSink | None = None) -> Submission:
        """Schedule ``turn``; its card streams through ``sink`` (default: its platform's own sink)."""
        target = turn.target
        ctx = ToolContext(
            user_id=turn.principal.id, user_name=turn.principal.name, platform=target.platform,
            conversation_id=turn.conversation_id, chat_id=target.chat_id, is_group=target.is_group,
        )
        msg = InboundMessage(
            platform=target.platform, message_id="", conversation_id=turn.conversation_id, text=turn.question,
            target=target, ctx=ctx, principal=turn.principal,
        )
        return await self._gateway.submit_unprompted(
            msg, sink or self._sinks[target.platform], self.policy(target.platform), role=turn.role, tools=turn.tools
        )
