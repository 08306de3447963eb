"""Answers on record: what a finished answer was asked and what it used, for its Refresh and its votes.

When a question the gateway admitted ends with an answer (outcome ``done``),
:class:`AnswerBook` keeps an :class:`Answer` in the Store for
:data:`ANSWER_TTL_S`: the question as the model got it, where it was asked
(the card's target), and what helps judge it (the model, the tools used, the
sources of their data). A Refresh (:mod:`botgateway.answers.refresh`) asks its
question again; a 👍/👎 (:mod:`botgateway.answers.feedback`) is stored with what it used.

The record is written by the book as the turn's :class:`~botgateway.telemetry.TurnObserver`
(from the turn's audit record, in the background); a read of the same process
waits for a write still in flight, so a button pressed the moment the card is
final finds its answer. Turns nobody typed (an alert's investigation, a report)
are not kept: their cards carry no such buttons. Admission marks the card
target of each question it admits (:func:`as_question`); only such a card
offers them (:func:`offers_answer_controls`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from cachetools import LRUCache

from botgateway.background import BackgroundTasks
from botgateway.cards.metrics import CardMetrics
from botgateway.messages import InboundMessage
from botgateway.sink import CardTarget, target_to_dict
from botgateway.snapshot import CardSnapshot
from botgateway.stores.base import AuditRecord, DocumentStore

__all__ = [
    "ANSWERABLE", "ANSWER_TTL_S", "Answer", "AnswerBook", "as_question", "is_question", "offers_answer_controls",
    "sources_of",
]

log = structlog.get_logger(__name__)

ANSWER_TTL_S = 7 * 86400.0
"""How long an answer can be refreshed and voted on with what it used (a vote after that is kept without it)."""

_MAX_EXPECTED = 10_000
"""Questions in progress whose messages are kept for their record, at most (a turn moved away never ends here)."""

_MAX_SOURCES = 20
"""Sources kept per answer: enough to judge it, small enough for the feedback rows."""


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A finished answer as the Store keeps it."""

    turn_id: str
    """The turn that answered."""
    conversation_id: str
    """The conversation it belongs to (a Refresh asks in it again)."""
    platform: str
    """The adapter it was asked on."""
    question: str
    """The question as the model got it."""
    asker: str
    """Who asked it (a qualified principal id, ``slack:U0123``)."""
    channel: str
    """The chat or channel it was asked in (the platform's id)."""
    target: Mapping[str, Any] = field(default_factory=dict)
    """Where its card is (:func:`~botgateway.sink.target_to_dict`): a press that does not say where it came from is
    placed by it."""
    model: str = ""
    """The model that answered."""
    tools: tuple[str, ...] = ()
    """The tools it called, in order, each once."""
    sources: tuple[Mapping[str, Any], ...] = ()
    """Where its tools' data came from (provider, label, account, region, api, fetched_at, cached), each once."""
    at: float = 0.0
    """Unix time the answer ended."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (the Store's document)."""
        return {
            "turn_id": self.turn_id, "conversation_id": self.conversation_id, "platform": self.platform,
            "question": self.question, "asker": self.asker, "channel": self.channel, "target": dict(self.target),
            "model": self.model, "tools": list(self.tools), "sources": [dict(s) for s in self.sources], "at": self.at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Answer:
        """The inverse of :meth:`to_dict`; missing or odd fields take their defaults."""
        target = data.get("target")
        sources = data.get("sources")
        return cls(
            turn_id=str(data.get("turn_id") or ""),
            conversation_id=str(data.get("conversation_id") or ""),
            platform=str(data.get("platform") or ""),
            question=str(data.get("question") or ""),
            asker=str(data.get("asker") or ""),
            channel=str(data.get("channel") or ""),
            target=dict(target) if isinstance(target, Mapping) else {},
            model=str(data.get("model") or ""),
            tools=tuple(str(name) for name in data.get("tools") or ()),
            sources=tuple(dict(s) for s in sources if isinstance(s, Mapping)) if isinstance(sources, list) else (),
            at=float(data.get("at") or 0.0),
        )


ANSWERABLE = "answerable"
"""The key of :attr:`~botgateway.sink.CardTarget.extra` that marks a typed question's card (:func:`as_question`)."""


def as_question(msg: InboundMessage) -> InboundMessage:
    """``msg`` with its card target marked as a typed question's: its final answer offers Refresh and 👍 / 👎.

    Admission marks the questions it admits; a turn nobody typed (a report, an alert's investigation) is never
    marked, so its card offers neither (nobody asked it, and its answer is not kept on record).
    """
    return replace(msg, target=replace(msg.target, extra={**msg.target.extra, ANSWERABLE: True}))


def is_question(target: CardTarget) -> bool:
    """Whether ``target`` is the card of a typed question's turn (:func:`as_question`, and a turn id)."""
    return bool(target.turn_id) and target.extra.get(ANSWERABLE) is True


def offers_answer_controls(snapshot: CardSnapshot, target: CardTarget) -> bool:
    """Whether ``target``'s card showing ``snapshot`` offers Refresh and 👍 / 👎 for its turn: a final answer (done,
    the last part of it) to a typed question (:func:`is_question`: a report's or an alert's card has none, a note
    has no turn)."""
    return is_question(target) and snapshot.status == "done" and not snapshot.continued and not snapshot.preamble


def sources_of(record: AuditRecord) -> tuple[dict[str, Any], ...]:
    """The sources of a turn's tool calls (as its audit record keeps them), each once, in order of first use."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for call in record.tool_calls:
        for source in call.get("sources") or ():
            if not isinstance(source, Mapping):
                continue
            key = tuple(source.get(k, "") for k in ("provider", "account", "region", "api", "cached"))
            seen.setdefault(key, dict(source))
    return tuple(seen.values())[:_MAX_SOURCES]


def _answer_key(turn_id: str) -> str:
    return f"answer:{turn_id}"


def _latest_key(conversation_id: str) -> str:
    return f"answer-latest:{conversation_id}"


class AnswerBook:
    """The answers of this process's turns, written to the Store as they end, and read back by turn or conversation.

    Args:
        store: Where the answers are kept (shared by a fleet).
        model_label: The configured model, named when a turn did not say which model answered.
        ttl_s: How long an answer is kept.
        clock: Wall clock in Unix seconds.
    """

    def __init__(self, store: DocumentStore, *, model_label: str = "", ttl_s: float = ANSWER_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._model_label = model_label
        self._ttl_s = ttl_s
        self._clock = clock
        self._expected: LRUCache[str, InboundMessage] = LRUCache(_MAX_EXPECTED)
        self._writes: dict[str, asyncio.Task[Any]] = {}
        self._tasks = BackgroundTasks()

    def expect(self, msg: InboundMessage, turn_id: str) -> None:
        """``turn_id`` answers ``msg`` (an admitted question): keep its answer when it ends done."""
        if turn_id:
            self._expected[turn_id] = msg

    def turn_ended(self, record: AuditRecord, card: CardMetrics | None) -> None:
        """The turn's audit record is written: keep its answer (in the background) when it was expected and done."""
        msg = self._expected.pop(record.turn_id, None)
        if msg is None or record.outcome != "done":
            return
        names = tuple(dict.fromkeys(str(call.get("name", "")) for call in record.tool_calls if call.get("name")))
        answer = Answer(
            turn_id=record.turn_id, conversation_id=msg.conversation_id, platform=msg.platform, question=msg.text,
            asker=record.principal, channel=record.channel, target=target_to_dict(msg.target),
            model=str(record.extra.get("model") or self._model_label), tools=names, sources=sources_of(record),
            at=self._clock(),
        )
        task = self._tasks.spawn(self._write(answer), name=f"answer:{record.turn_id}")
        if task is not None:
            self._writes[record.turn_id] = task
            task.add_done_callback(lambda _: self._writes.pop(record.turn_id, None))

    async def _write(self, answer: Answer) -> None:
        try:
            await self._store.put_document(_answer_key(answer.turn_id), answer.to_dict(), self._ttl_s)
            latest = {"turn_id": answer.turn_id}
            await self._store.put_document(_latest_key(answer.conversation_id), latest, self._ttl_s)
        except Exception as exc:  # the answer stands; only its Refresh and the context of its votes are lost
            log.warning("answers.not_recorded", turn_id=answer.turn_id, error=type(exc).__name__)

    async def get(self, turn_id: str) -> Answer | None:
        """The answer of ``turn_id``, or None when unknown, expired or unreadable (logged)."""
        write = self._writes.get(turn_id)
        if write is not None:
            await asyncio.wait({write})
        try:
            data = await self._store.get_document(_answer_key(turn_id))
        except Exception as exc:
            log.warning("answers.unreadable", turn_id=turn_id, error=type(exc).__name__)
            return None
        return Answer.from_dict(data) if data else None

    async def latest(self, conversation_id: str) -> Answer | None:
        """The newest answer of ``conversation_id`` (within :data:`ANSWER_TTL_S`), or None."""
        pending = [task for task in self._writes.values() if not task.done()]
        if pending:
            await asyncio.wait(pending)
        try:
            pointer = await self._store.get_document(_latest_key(conversation_id))
        except Exception as exc:
            log.warning("answers.unreadable", conversation=conversation_id, error=type(exc).__name__)
            return None
        turn_id = str((pointer or {}).get("turn_id") or "")
        return await self.get(turn_id) if turn_id else None

    async def aclose(self) -> None:
        """Wait briefly for answers still being written, then drop them (shutdown)."""
        await self._tasks.wait(timeout=2.0)
        await self._tasks.aclose()
