"""The Store's contracts: one narrow protocol per concern, their union :class:`Store`, and the records they carry.

Conversation history (committed one whole turn at a time, :class:`ConversationStore`),
dedupe keys with a TTL (:class:`ClaimStore`), open cards, so a restart finalizes
them instead of leaving spinners (:class:`OpenCardStore`), heartbeats of the live
gateway processes, whose cards are not orphans (:class:`InstanceStore`), counters
and leases (:class:`CounterStore`, :class:`LeaseStore`), JSON documents with a TTL
(:class:`DocumentStore`), audit records (:class:`AuditStore`), model usage
(:class:`UsageStore`), votes on answers (:class:`FeedbackStore`) and the
connection's lifecycle (:class:`StoreLifecycle`). A part of the gateway depends
on the few it uses; only the composition root holds the whole :class:`Store`.
SQLite (:mod:`botgateway.stores.sqlite`) is the embedded default; Redis
(:mod:`botgateway.stores.redis`) serves several replicas; both implement every one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "UNFINISHED",
    "AuditRecord",
    "AuditStore",
    "ClaimStore",
    "ConversationStore",
    "CounterStore",
    "DocumentStore",
    "FeedbackRecord",
    "FeedbackStore",
    "HistorySnapshot",
    "HistoryWrite",
    "InstanceStore",
    "LeaseStore",
    "Message",
    "OpenCard",
    "OpenCardStore",
    "Store",
    "StoreError",
    "StoreLifecycle",
    "StoredTurn",
    "ToolCallRow",
    "UsageRow",
    "UsageStore",
    "VersionStep",
    "apply_write",
]

UNFINISHED = "unfinished"
"""The outcome of an audit record made from a turn's tool-call rows: it never ended (running, or its process was killed)."""


class StoreError(Exception):
    """The store cannot be opened or used; the message says what to do (and never holds a password)."""


Message = dict[str, Any]
"""One chat message in OpenAI format (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""


@dataclass(frozen=True)
class StoredTurn:
    """One completed turn: the user's message through the final answer, never split."""

    turn_id: str
    """Unique id of the turn."""
    messages: tuple[Message, ...]
    """The turn's messages in order: user, assistant (with tool_calls), tool results…, assistant."""
    created_at: float
    """Unix time the turn was committed."""
    is_summary: bool = False
    """True for a turn that stands for summarized older turns."""


@dataclass(frozen=True)
class HistoryWrite:
    """One change to a conversation's history, as the writer hands it to :meth:`ConversationStore.write_history`.

    Every kind is idempotent when the changes before it are applied again in
    order (appending a turn id already there is a no-op, removing an absent one
    too), so a group that failed half-way can simply be written again.
    """

    conversation_id: str
    """Conversation key."""
    kind: Literal["append", "replace", "clear"]
    """``append`` one turn; ``replace`` ``remove_ids`` by ``turn`` (a summary, or nothing); ``clear`` everything."""
    turn: StoredTurn | None = None
    """The appended turn, or the summary put first by a ``replace``."""
    remove_ids: tuple[str, ...] = ()
    """The turns a ``replace`` drops."""
    fence: int | None = None
    """The fencing token of the conversation's lease the writer held (``None``: none held, nothing checked).

    A store shared by several processes (Redis) refuses a write whose token is
    older than the conversation's current one: the writer lost the lease (it was
    paused past its expiry) and another process has taken the conversation since.
    """


@dataclass(frozen=True)
class HistorySnapshot:
    """One conversation as :meth:`ConversationStore.load_histories` read it."""

    turns: tuple[StoredTurn, ...] | None
    """The turns, oldest first; ``None`` when the caller's version is still current (nothing was read)."""
    version: int | None = None
    """Changes with every history write of any process; ``None`` for a store only this process writes (SQLite)."""
    expires_at: float | None = None
    """Unix time the store forgets the conversation unless it is written again (``None``: never, or no turns)."""


@dataclass(frozen=True)
class VersionStep:
    """A history write moved the conversation's version from ``before`` to ``after`` (stores that keep versions)."""

    before: int
    """The version the write found (0: none kept, e.g. a new or expired conversation)."""
    after: int
    """The version the write left."""
    refused: bool = False
    """The store refused the write (its fencing token is older than the conversation's): nothing changed."""


def apply_write(turns: Sequence[StoredTurn], write: HistoryWrite) -> list[StoredTurn]:
    """``turns`` after ``write``, exactly as both back-ends apply it (for a copy of the history held in memory)."""
    if write.kind == "clear":
        return []
    if write.kind == "append":
        assert write.turn is not None
        if any(turn.turn_id == write.turn.turn_id for turn in turns):
            return list(turns)
        return [*turns, write.turn]
    removed = set(write.remove_ids)
    kept = [turn for turn in turns if turn.turn_id not in removed]
    if write.turn is None:
        return kept
    return [write.turn, *(turn for turn in kept if turn.turn_id != write.turn.turn_id)]


@dataclass(frozen=True)
class OpenCard:
    """A card that is still streaming; finalized at start-up if the process died."""

    platform: str
    """Adapter that owns the card."""
    card_id: str
    """The platform's id of the card."""
    turn_id: str
    """The turn that the card shows."""
    target: Mapping[str, Any]
    """JSON-ready description of where the card lives (enough for the adapter to finalize it)."""
    created_at: float
    """Unix time the card was created."""
    owner: str = ""
    """Instance id of the gateway process streaming the card; empty when unknown (then the age rule applies).

    Recovery spares a card whose owner is live (see :meth:`InstanceStore.live_instances`)
    and closes it once that owner stops sending heartbeats.
    """
    resume: Mapping[str, Any] = field(default_factory=dict)
    """JSON-ready: what a recovering process needs to run the card's turn again, once (the question, who asked where,
    the tool calls made so far; :mod:`botgateway.turns.resume`). Empty when the turn is not to be resumed, or a
    release that kept none wrote the record."""


@dataclass(frozen=True)
class AuditRecord:
    """Who asked what, which tools ran, and how the turn ended."""

    turn_id: str
    """Unique id of the turn."""
    platform: str
    """Adapter the question came from."""
    conversation_id: str
    """Conversation key."""
    user_id: str
    """The asker."""
    question: str
    """The user's text."""
    outcome: str
    """``done``, ``failed:<reason>``, ``stopped``, or :data:`UNFINISHED` (listed from its tool-call rows)."""
    answer: str = ""
    """Final (or partial) answer."""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """Each call's name, arguments and outcome."""
    prompt_tokens: int = 0
    """Prompt tokens used."""
    completion_tokens: int = 0
    """Completion tokens used."""
    started_at: float = 0.0
    """Unix time the turn started."""
    duration_s: float = 0.0
    """Wall time of the turn."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else worth keeping (card metrics)."""
    principal: str = ""
    """The asker's platform-qualified id (``slack:U0123``); empty in records of older releases."""
    team: str = ""
    """The workspace or organisation asked in (Slack team, DingTalk corp)."""
    channel: str = ""
    """The channel or chat asked in."""
    role: str = ""
    """The asker's role(s) under the access policy, comma-separated."""


@dataclass(frozen=True)
class ToolCallRow:
    """A tool call starting or ending, written as it happens: a turn killed mid-way still has its calls audited."""

    turn_id: str
    """The turn that made the call."""
    call_id: str
    """The call's id within the turn."""
    phase: Literal["started", "finished"]
    """Whether the call started or ended."""
    name: str
    """The tool's name as the model called it."""
    at: float
    """Unix time of the start or the end."""
    platform: str = ""
    """Adapter the question came from."""
    conversation_id: str = ""
    """Conversation key."""
    user_id: str = ""
    """The asker."""
    question: str = ""
    """The user's text (so an unfinished turn's audit record says what was asked)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The call's arguments (on the start)."""
    ok: bool | None = None
    """Whether the tool succeeded (on the end)."""
    summary: str = ""
    """The one-line outcome (on the end)."""
    duration_s: float = 0.0
    """Wall time of the call (on the end)."""
    principal: str = ""
    """The asker's platform-qualified id (``slack:U0123``)."""
    team: str = ""
    """The workspace or organisation asked in."""
    channel: str = ""
    """The channel or chat asked in."""
    role: str = ""
    """The asker's role(s) under the access policy, comma-separated."""
    approval: str = ""
    """The approval decision for a call that needs one (``approved by …``, ``denied``); empty when none was needed."""


@dataclass(frozen=True)
class UsageRow:
    """One model call's tokens and cost, written after its turn (``botgateway usage`` sums them)."""

    at: float
    """Unix time the model reported the usage (the end of the call)."""
    turn_id: str = ""
    """The turn that made the call; empty for a call outside any turn (a history summary)."""
    conversation_id: str = ""
    """Conversation key; empty when unknown."""
    principal: str = ""
    """Who it was for: the asker's qualified id (``slack:U0123``), or ``gateway`` for the gateway's own calls."""
    platform: str = ""
    """Adapter the question came from; empty for the gateway's own calls."""
    channel: str = ""
    """The channel or chat asked in."""
    model: str = ""
    """The model as the provider named it in its answer, else as configured."""
    purpose: str = "turn"
    """``turn`` (answering a question) or ``summary`` (compressing a conversation's history)."""
    prompt_tokens: int = 0
    """Tokens the model read."""
    completion_tokens: int = 0
    """Tokens the model wrote (reasoning included)."""
    cached_tokens: int = 0
    """Of the prompt tokens, those served from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Of the completion tokens, those spent reasoning."""
    cost: float | None = None
    """What the call cost at the prices configured when it was recorded; ``None`` when its model had no price."""
    currency: str = ""
    """The currency of ``cost`` (``usage.currency``)."""
    row_id: str = ""
    """The call's own id (``<turn id>:<n>`` for a turn's n-th call): a store keeps one row per id, so a write
    retried after a lost reply is not counted twice. Empty (rows of an older release): always written."""


@dataclass(frozen=True, kw_only=True)
class FeedbackRecord:
    """One person's vote on one answer (👍/👎), with what helps judge the answer; one per voter and answer."""

    turn_id: str
    """The turn whose answer was voted on."""
    voter: str
    """Who voted (a qualified principal id, ``slack:U0123``)."""
    vote: Literal["up", "down"]
    """👍 (``up``) or 👎 (``down``); a second click changes it."""
    at: float
    """Unix time of the vote (of its last change)."""
    reason: str = ""
    """Why, in one line (a 👎's optional reason); empty when none was given."""
    platform: str = ""
    """The adapter the answer was given on."""
    channel: str = ""
    """The chat or channel of the answer."""
    asker: str = ""
    """Who asked the question (a qualified principal id)."""
    question: str = ""
    """The question (secrets masked)."""
    model: str = ""
    """The model that answered."""
    tools: tuple[str, ...] = ()
    """The tools the answer used."""
    sources: tuple[Mapping[str, Any], ...] = ()
    """Where the tools' data came from (provider, label, account, region, api, fetched_at, cached)."""


@runtime_checkable
class ConversationStore(Protocol):
    """Conversation history, committed one whole turn at a time (a summary turn stands for older ones)."""

    history_ttl_s: float | None
    """A conversation idle this long is forgotten (``None``: kept); a copy held in memory must forget it too."""

    async def load_turns(self, conversation_id: str) -> list[StoredTurn]:
        """The conversation's turns, oldest first (a summary turn, if any, comes first)."""
        ...

    async def append_turn(self, conversation_id: str, turn: StoredTurn) -> None:
        """Commit one completed turn atomically."""
        ...

    async def replace_turns(self, conversation_id: str, remove_ids: Sequence[str], summary: StoredTurn | None) -> None:
        """Atomically drop ``remove_ids`` and put ``summary`` (if any) before the remaining turns."""
        ...

    async def clear(self, conversation_id: str) -> None:
        """Forget the conversation."""
        ...

    async def load_histories(
        self, conversation_ids: Sequence[str], *, unless_version: Mapping[str, int] | None = None
    ) -> dict[str, HistorySnapshot]:
        """Several conversations in one read (one query, one pipeline), each a consistent snapshot.

        A conversation whose version still equals ``unless_version[id]`` comes back
        with ``turns=None``: the caller's copy is current and nothing was decoded.
        """
        ...

    async def history_index(self, limit: int) -> frozenset[str] | None:
        """Every conversation that has history here, when this process is the only one writing it.

        A conversation outside it has none, so its first question needs no read. ``None`` when other
        processes may write the history too (no such list stays true) or there are more than ``limit``.
        """
        ...

    async def write_history(self, writes: Sequence[HistoryWrite]) -> list[VersionStep | None]:
        """Apply ``writes`` in order, grouped (one transaction, or one pipeline of atomic steps).

        Returns, per write, how it moved its conversation's version (``None`` when
        the store keeps no versions; ``refused`` when its fencing token is stale,
        see :attr:`HistoryWrite.fence`). On an error none, some or all writes may have
        been applied; writing the same group again is safe (see :class:`HistoryWrite`).
        """
        ...


@runtime_checkable
class ClaimStore(Protocol):
    """Dedupe: keys claimed once within a TTL (a delivery, a recovery, a schedule's slot), shared by every replica."""

    async def claim(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is seen within ``ttl_s`` seconds (dedupe), False after."""
        ...


@runtime_checkable
class OpenCardStore(Protocol):
    """The records of cards still streaming, so a restart finalizes them instead of leaving spinners."""

    async def add_open_card(self, card: OpenCard) -> None:
        """Remember a card that is streaming."""
        ...

    async def remove_open_card(self, platform: str, card_id: str) -> None:
        """Forget a card once it is finalized."""
        ...

    async def open_cards(self, platform: str | None = None) -> list[OpenCard]:
        """Cards still open (all platforms when ``platform`` is None)."""
        ...


@runtime_checkable
class InstanceStore(Protocol):
    """Heartbeats of the live gateway processes (whose open cards are not orphans)."""

    async def heartbeat(self, instance_id: str, ttl_s: float) -> None:
        """Mark the gateway process ``instance_id`` live for the next ``ttl_s`` seconds."""
        ...

    async def live_instances(self) -> set[str]:
        """Ids of the gateway processes whose last heartbeat has not expired."""
        ...

    async def forget_instance(self, instance_id: str) -> None:
        """Drop ``instance_id``'s heartbeat at once (a clean shutdown), so its cards count as orphaned."""
        ...


@runtime_checkable
class CounterStore(Protocol):
    """Counters of fixed windows (per-principal limits, failed logins, marks), shared by every replica."""

    async def add_to_counter(self, key: str, amount: int, ttl_s: float) -> int:
        """Atomically add ``amount`` (0 reads) to counter ``key`` and return its new total.

        A counter starts at 0 and expires ``ttl_s`` seconds after it was created
        (adding does not extend it), then starts at 0 again: the windows of the
        per-principal limits, shared by every replica.
        """
        ...


@runtime_checkable
class LeaseStore(Protocol):
    """Leases: one of a limited number of places under a key, each held by a named holder until it lapses."""

    async def take_lease(self, key: str, holder: str, limit: int, ttl_s: float) -> bool:
        """Hold one of ``limit`` leases of ``key`` for ``ttl_s`` seconds; False when all are held by others.

        Taking again a lease ``holder`` already holds renews it. A lease whose
        holder died lapses after its TTL, so a killed process never keeps one.
        """
        ...

    async def drop_lease(self, key: str, holder: str) -> None:
        """Give back ``holder``'s lease of ``key`` (nothing when it holds none)."""
        ...


@runtime_checkable
class DocumentStore(Protocol):
    """JSON documents under keys, each with a TTL (alert cards, answers, sessions); the last write wins."""

    async def get_document(self, key: str) -> dict[str, Any] | None:
        """The JSON document stored under ``key`` (an alert group's card), or None when absent or expired."""
        ...

    async def put_document(self, key: str, data: Mapping[str, Any], ttl_s: float) -> None:
        """Store the JSON-ready ``data`` under ``key`` for ``ttl_s`` seconds, replacing what was there.

        The last write wins: writers of one key serialize themselves (with :meth:`LeaseStore.take_lease`).
        """
        ...


@runtime_checkable
class AuditStore(Protocol):
    """The audit trail: tool calls written as they happen, then one record per turn (or refusal)."""

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""
        ...

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record; the turn's tool-call rows are dropped (the record holds its calls)."""
        ...

    async def audit_records(self, *, conversation_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first.

        A turn with tool-call rows but no audit record yet (running, or its
        process was killed) is listed as an :data:`UNFINISHED` record made from them.
        """
        ...


@runtime_checkable
class UsageStore(Protocol):
    """One usage row per model call: tokens and cost, summed by ``botgateway usage`` and the console."""

    async def record_usage(self, rows: Sequence[UsageRow]) -> None:
        """Append model calls' usage rows, all at once (one transaction, one script); a row whose ``row_id`` is
        already stored is skipped, so writing the same rows again (a retry after a lost reply) stores them once."""
        ...

    async def usage_rows(self, *, since: float | None = None, limit: int = 100_000) -> list[UsageRow]:
        """The newest ``limit`` usage rows recorded from ``since`` (Unix time) on, oldest first."""
        ...


@runtime_checkable
class FeedbackStore(Protocol):
    """The votes on answers (👍/👎), one per voter and answer."""

    async def record_feedback(self, record: FeedbackRecord) -> None:
        """Keep ``record``, replacing the voter's earlier vote on the same answer (one vote per voter and answer)."""
        ...

    async def feedback_vote(self, turn_id: str, voter: str) -> FeedbackRecord | None:
        """``voter``'s vote on the answer of ``turn_id``, if any."""
        ...

    async def feedback_records(self, *, since: float | None = None, limit: int = 1000) -> list[FeedbackRecord]:
        """The newest ``limit`` votes (changed at or after ``since``, when given), oldest first."""
        ...


@runtime_checkable
class StoreLifecycle(Protocol):
    """Opening, probing and closing the store's connections (the composition root and the probes)."""

    async def open(self) -> None:
        """Connect and create what is missing; raises when the store is unusable."""
        ...

    async def ping(self) -> None:
        """One cheap round trip (readiness probes); raises :class:`StoreError` when the store does not answer."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class Store(
    ConversationStore,
    ClaimStore,
    OpenCardStore,
    InstanceStore,
    CounterStore,
    LeaseStore,
    DocumentStore,
    AuditStore,
    UsageStore,
    FeedbackStore,
    StoreLifecycle,
    Protocol,
):
    """Durable state: every concern at once, as both back-ends implement it. Every method is safe to call from
    concurrent tasks.

    Only the composition root (and the back-ends) hold the whole of it: every other part depends on the narrow
    protocol of the concern(s) it uses.
    """
