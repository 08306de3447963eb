"""Every model call's usage as a row with its cost: for ``botgateway usage`` and the metrics.

The loop reports each round's tokens and model in a
:class:`~botgateway.events.UsageReported`; the turn keeps them in its audit
record (``extra["usage"]``, one :func:`usage_entry` per call), and
:class:`UsageRecorder`, one of the gateway's
:class:`~botgateway.telemetry.TurnObserver`\\ s, turns them into
:class:`~botgateway.stores.base.UsageRow`\\ s once the card is final: priced
(:class:`~botgateway.usage.pricing.Pricing`) at that moment, handed to the listeners
(the Prometheus counters) and written behind by a
:class:`~botgateway.usage.writer.UsageWriter`. The gateway's own calls (the
summaries that compress a long history) are recorded as principal ``gateway``
through :meth:`UsageRecorder.summarizer`. Turns run by ``botgateway ask`` are
not recorded: like its turns, they are not audited.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Protocol

import structlog

from botgateway.cards.metrics import CardMetrics
from botgateway.events import ModelAnswering, Usage, UsageReported
from botgateway.model import AssembledRound, ChatModel, LLMError
from botgateway.principal import principal_id
from botgateway.stores.base import AuditRecord, UsageRow
from botgateway.usage.pricing import Pricing
from botgateway.usage.writer import UsageWriter

__all__ = ["GATEWAY_PRINCIPAL", "USAGE_KEY", "UsageListener", "UsageRecorder", "usage_entry", "usage_rows_of"]

log = structlog.get_logger(__name__)

USAGE_KEY = "usage"
"""The key of an audit record's ``extra`` holding its model calls (a list of :func:`usage_entry`)."""
GATEWAY_PRINCIPAL = "gateway"
"""The principal of the gateway's own model calls (history summaries)."""

_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")


class UsageListener(Protocol):
    """Told about every usage row as it is recorded (before it is written)."""

    def usage_recorded(self, row: UsageRow) -> None:
        """Count one model call; must not block or raise."""
        ...


def usage_entry(event: UsageReported, at: float) -> dict[str, Any]:
    """One model call as the turn's audit record keeps it (JSON-ready)."""
    entry: dict[str, Any] = {"at": round(at, 3), "model": event.model}
    entry.update((name, getattr(event, name)) for name in _COUNTS)
    return entry


def usage_rows_of(record: AuditRecord, pricing: Pricing) -> list[UsageRow]:
    """The usage rows of a turn's audit record, one per model call, priced now; none when it kept no usage.

    Each row's id is the turn's and the call's place in it: the same record always gives the same rows.
    """
    entries = record.extra.get(USAGE_KEY)
    if not isinstance(entries, list):
        return []
    principal = record.principal or principal_id(record.platform, record.user_id)
    rows: list[UsageRow] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        usage = _usage(entry)
        model = str(entry.get("model") or "")
        rows.append(UsageRow(
            at=_number(entry.get("at"), float) or record.started_at, turn_id=record.turn_id,
            conversation_id=record.conversation_id, principal=principal, platform=record.platform,
            channel=record.channel, model=model, purpose="turn", prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens, cost=pricing.cost(model, usage), currency=pricing.currency,
            row_id=f"{record.turn_id}:{index}" if record.turn_id else uuid.uuid4().hex,
        ))
    return rows


class UsageRecorder:
    """Records every model call's usage: rows priced, counted by the listeners, written behind.

    Args:
        writer: Writes the rows to the Store behind the answers.
        pricing: The configured prices (``usage:``).
        listeners: Told of each row (the Prometheus counters).
        clock: Wall clock in Unix seconds (the time of the gateway's own calls).
    """

    def __init__(
        self,
        writer: UsageWriter,
        pricing: Pricing,
        *,
        listeners: Sequence[UsageListener] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.writer = writer
        """The write-behind queue (``flush`` it to wait for the rows so far)."""
        self.pricing = pricing
        """The prices each row is costed at."""
        self._listeners = tuple(listeners)
        self._clock = clock

    def turn_ended(self, record: AuditRecord, card: CardMetrics | None) -> None:
        """Record the model calls of a finished turn (a :class:`~botgateway.telemetry.TurnObserver`)."""
        self._take(usage_rows_of(record, self.pricing))

    def call_ended(self, usage: Usage, model: str, *, purpose: str = "summary", principal: str = GATEWAY_PRINCIPAL) -> None:
        """Record one model call made outside any turn (by the gateway itself)."""
        self._take([UsageRow(
            at=self._clock(), principal=principal, model=model, purpose=purpose, prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens, cost=self.pricing.cost(model, usage),
            currency=self.pricing.currency, row_id=uuid.uuid4().hex,
        )])

    def summarizer(self, llm: ChatModel, model: str = "") -> Callable[[list[dict[str, Any]]], Awaitable[str]]:
        """A history summarizer over ``llm`` (as ``LLMClient.complete``) whose calls are recorded as the gateway's.

        ``model``: the name to record when the provider names none (the configured model).
        """

        async def summarize(messages: list[dict[str, Any]]) -> str:
            answering = ""  # the model a chain of endpoints says answers, if it says
            async with aclosing(llm.stream(messages)) as parts:
                async for item in parts:
                    if isinstance(item, ModelAnswering):
                        answering = item.model
                    elif isinstance(item, AssembledRound):
                        if item.usage is not None:
                            self.call_ended(item.usage, item.model or answering or model)
                        return item.text
            raise LLMError("The model ended the summary without an answer")

        return summarize

    async def aclose(self) -> None:
        """Write what is recorded (for a while), then stop; call after the gateway closed, before the store."""
        await self.writer.aclose()

    def _take(self, rows: list[UsageRow]) -> None:
        if not rows:
            return
        for row in rows:
            for listener in self._listeners:
                try:
                    listener.usage_recorded(row)
                except Exception as exc:  # metrics must never cost the record
                    log.warning("usage.listener_failed", error=type(exc).__name__)
        self.writer.submit(rows)


def _usage(entry: Mapping[str, Any]) -> Usage:
    """The counts of an audit record's usage entry (missing or malformed counts are 0)."""
    counts = {name: max(0, _number(entry.get(name), int)) for name in _COUNTS}
    return Usage(**counts)


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    """``value`` as ``kind`` when it is a number (not a bool), else 0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return kind(value)
    return kind(0)
