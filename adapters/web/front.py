"""What the API's routes share: the question as the gateway takes it, the caller's grant, and each turn's record.

An API question is an :class:`~botgateway.messages.InboundMessage` of the
caller's principal's platform (``api`` for a key), asked in a direct chat of
its own, through :meth:`Gateway.submit <botgateway.gateway.Gateway.submit>`
like any other (no dedupe, the access policy, the limits, the audit); its card
is the web sink's. Conversation ids are the caller's own: the gateway's key of
``ops-1`` asked with the key ``ci`` is ``api:ci:ops-1``, so one key cannot
reach another's history. Each turn's asker and conversation are kept in the
Store (:meth:`WebFront.remember`), so ``GET /v1/turns/{id}`` can find its
audit record and tell whose it is, in any process of the fleet. A conversation
is cleared only while no turn runs in it, here or, in a fleet, in any other live
process (``busy_elsewhere``: the fleet's directory of conversations). A new
conversation may be given a client's earlier messages as its history before
its first question (:meth:`WebFront.seed_history`, written as memory writes a
finished turn).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from adapters.web.body import BadRequest
from adapters.web.sink import PLATFORM, WebSink
from adapters.web.tap import EventTap
from botgateway.access import Decision, decide_message, effective_policy
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.config import Config
from botgateway.fleet import StopAnswer
from botgateway.messages import InboundMessage, Submission
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.stores.base import AuditRecord, AuditStore, CounterStore, DocumentStore, Message
from botgateway.tooling import ToolContext, ToolRegistry

if TYPE_CHECKING:
    from botgateway.gateway import Gateway

log = structlog.get_logger(__name__)

__all__ = ["ApiStore", "BusyElsewhere", "HistorySeed", "TurnOwner", "WebFront", "conversation_key"]

BusyElsewhere = Callable[[str], Awaitable[set[str]]]
"""The other live processes holding turns of a conversation (the fleet directory's ``conversation_owners``)."""

HistorySeed = Callable[[str, str, Sequence[Message]], Awaitable[None]]
"""Writes one whole turn (conversation key, turn id, messages) into a conversation's history: memory's ``commit``."""

_CONVERSATION = re.compile(r"^[A-Za-z0-9_.:@-]{1,100}$")
"""A client's conversation id: short, no spaces or slashes (it is a path segment too)."""

TURN_RECORD_TTL_S = 90 * 86400.0
"""How long a turn's asker and conversation are kept for ``GET /v1/turns/{id}`` (the audit's own default)."""

AUDIT_SEARCH_LIMIT = 500
"""How many of a conversation's newest audit records are searched for a turn's."""


class ApiStore(DocumentStore, AuditStore, CounterStore, Protocol):
    """The part of the Store the API uses: the turns' owners (documents), their audit records, and the counts of
    wrong keys (counters)."""


def conversation_key(principal: Principal, conversation: str) -> str:
    """The gateway's conversation key of the caller's ``conversation``: its own, under its principal's id."""
    return f"{principal.id}:{conversation}"


@dataclass(frozen=True)
class TurnOwner:
    """Whose an API turn is, as kept in the Store."""

    principal: str
    """The asker's principal id (``api:ci``)."""
    conversation: str
    """The caller's conversation id (without the principal's prefix)."""


class WebFront:
    """The gateway, the web sink and the Store, as the API's routes use them (the gateway is set once it runs)."""

    def __init__(self, config: Config, *, sink: WebSink, store: ApiStore, tools: ToolRegistry,
                 clear: Callable[[str], Awaitable[None]], busy_elsewhere: BusyElsewhere | None = None,
                 seed: HistorySeed | None = None) -> None:
        """``busy_elsewhere``: where else a conversation's turns run (None: this process is the only one);
        ``seed``: where a client's earlier messages are written as a new conversation's history (None: they are
        not kept)."""
        self.config = config
        """The whole configuration (``web``, ``access``, ``gateway``)."""
        self.sink = sink
        """Where the API's cards go: each turn's newest snapshot."""
        self.store = store
        """Audit records, the turns' owners and the counts of wrong keys."""
        self.tools = tools
        """The tools that exist (the caller is offered its grant of them)."""
        self.gateway: Gateway | None = None
        """The gateway, once the adapter started; until then the API answers 503."""
        self.receiving = False
        """Whether new questions are taken (false before start and once draining)."""
        self._clear = clear
        self._busy_elsewhere = busy_elsewhere
        self._seed = seed
        self._policy = BufferPolicy.from_config()

    def new_conversation(self) -> str:
        """A fresh conversation id for a call that names none."""
        return uuid.uuid4().hex[:16]

    def checked_conversation(self, conversation: str) -> str:
        """``conversation`` when it is a usable id; raises :class:`BadRequest` otherwise."""
        if not _CONVERSATION.match(conversation):
            raise BadRequest("'conversation' must be 1-100 letters, digits or . _ : @ - (no spaces or slashes)")
        return conversation

    def message(self, principal: Principal, question: str, conversation: str, locale: str) -> InboundMessage:
        """``question`` of ``principal`` in its ``conversation``, as the gateway takes it."""
        key = conversation_key(principal, conversation)
        name = principal.name or principal.user
        target = CardTarget(platform=PLATFORM, chat_id=conversation, user_id=principal.id, user_name=name,
                            locale=locale)
        ctx = ToolContext(user_id=principal.id, user_name=name, platform=principal.platform, conversation_id=key,
                          chat_id=principal.user, principal=principal)
        return InboundMessage(principal.platform, "", key, question, target, ctx, principal)

    async def seed_history(self, msg: InboundMessage, turns: Sequence[Sequence[Message]]) -> None:
        """Make ``turns`` (whole turns, oldest first) the history of ``msg``'s conversation, before it is asked: a
        conversation the client did not name, opened for this question. 503 once the gateway takes no questions."""
        self.running_gateway()  # nothing is written for a question that would be refused as the process drains
        if self._seed is None:
            return
        for number, turn in enumerate(turns, 1):
            await self._seed(msg.conversation_id, f"client-{number}", turn)

    async def ask(self, msg: InboundMessage, tap: EventTap | None) -> Submission:
        """Submit ``msg``; ``tap`` (if any) gets the turn's events. The turn's owner is kept for later lookups."""
        gateway = self.running_gateway()
        submission = await gateway.submit(msg, self.sink, self._policy, events=tap)
        if submission.status in ("started", "queued"):
            conversation = msg.target.chat_id
            await self.remember(submission.turn_id, TurnOwner(principal=msg.asker.id, conversation=conversation))
        return submission

    def running_gateway(self, *, asking: bool = True) -> Gateway:
        """The gateway; raises :class:`BadRequest` (503) before it started and, for a new question (``asking``),
        once it drains (stops, lookups and votes still work then)."""
        if self.gateway is None or (asking and not self.receiving):
            raise BadRequest("the gateway is not taking questions now (starting or shutting down); try again", 503)
        return self.gateway

    async def stop(self, turn_id: str, user_id: str) -> StopAnswer:
        """Stop ``turn_id`` as ``user_id`` (its asker, or an admin), as "stop" does."""
        return await self.running_gateway(asking=False).stop(turn_id, user_id)

    def decision(self, principal: Principal) -> Decision:
        """What the policy grants ``principal`` where its questions are asked (the tools it is offered)."""
        probe = self.message(principal, "", "tools", "en")
        return decide_message(effective_policy(self.config.access), probe, self.tools.names,
                              always_approve=self.tools.approval_required())

    def tool_list(self, principal: Principal) -> list[dict[str, Any]]:
        """The tools ``principal`` may use, as the model is offered them, each with whether a call needs approval."""
        decision = self.decision(principal)
        if decision.grant is None:
            return []
        ctx = ToolContext(principal=principal, grant=decision.grant)
        listed = []
        for spec in self.tools.specs(ctx):
            function = spec["function"]
            listed.append({**function, "approval": function["name"] in decision.grant.approval})
        return listed

    def is_admin(self, principal: Principal) -> bool:
        """Whether ``principal`` may see and stop anyone's turns: listed in ``gateway.admins`` or holding ``admin``."""
        if principal.id in self.config.gateway.admins:
            return True
        grant = self.decision(principal).grant
        return grant is not None and "admin" in grant.roles

    async def remember(self, turn_id: str, owner: TurnOwner) -> None:
        """Keep whose ``turn_id`` is (best effort: a lookup of it later answers 404 when the Store failed)."""
        try:
            await self.store.put_document(_owner_key(turn_id), {"principal": owner.principal,
                                                               "conversation": owner.conversation}, TURN_RECORD_TTL_S)
        except Exception as exc:  # the answer matters more than its later lookup
            log.warning("web.turn_owner_not_kept", turn_id=turn_id, error=type(exc).__name__)

    async def owner(self, turn_id: str) -> TurnOwner | None:
        """Whose ``turn_id`` is, when it was asked through the API."""
        data = await self.store.get_document(_owner_key(turn_id))
        if not data:
            return None
        return TurnOwner(principal=str(data.get("principal", "")), conversation=str(data.get("conversation", "")))

    async def record(self, turn_id: str, owner: TurnOwner) -> AuditRecord | None:
        """The audit record of ``turn_id`` (None while it runs, or when it is no longer kept)."""
        key = f"{owner.principal}:{owner.conversation}"
        records = await self.store.audit_records(conversation_id=key, limit=AUDIT_SEARCH_LIMIT)
        return next((r for r in reversed(records) if r.turn_id == turn_id), None)

    async def clear(self, principal: Principal, conversation: str) -> bool:
        """Forget the caller's ``conversation``; False (nothing done) while a turn runs in it, in this process or
        another live one of the fleet."""
        key = conversation_key(principal, conversation)
        if self.running_gateway(asking=False).running_turn(key) is not None:
            return False
        if self._busy_elsewhere is not None and await self._busy_elsewhere(key):
            return False
        await self._clear(key)
        return True


def _owner_key(turn_id: str) -> str:
    return f"web:turn:{turn_id}"
