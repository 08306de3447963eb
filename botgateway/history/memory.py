"""Conversation memory: whole turns in, a budgeted history out.

A turn (the user's message through the final answer, tool calls and their
results included) is the unit of everything here: it is committed whole, it is
summarized or dropped whole, so an assistant ``tool_calls`` message is never
separated from its ``tool`` results (providers reject such a history).

When the stored history is over ``max_history_tokens``, the turns older than
the ``keep_recent_turns`` newest are folded, together with the previous
summary, into one new summary by the ``summarizer`` (the model). The summary
goes back into the store atomically in place of the turns it covers. If there
is no summarizer, or it fails (error, timeout, empty answer), the oldest whole
turns are dropped until the history fits instead. What is sent never exceeds
the budget: when the newest turns alone are over it, their longest messages are
cut (:func:`~botgateway.history.tokens.fit_to_tokens`) in what is sent, while
the store keeps them whole. :func:`trim_history` is the same bound for a
request the provider refused as too long.

The summary reaches the model as a ``user`` message followed by a short
``assistant`` acknowledgement. That keeps the user/assistant alternation that
strict OpenAI-compatible providers enforce, and never adds a second ``system``
message (several providers reject one that is not first).

Token counts are estimates (:mod:`botgateway.history.tokens`); the summary
turn and its request are :mod:`botgateway.history.summary`.

The store stays off the turn's critical path. History is read from a bounded
per-conversation cache (:mod:`botgateway.history.cache`: a miss reads the
store once, batched with the other misses of the moment; with Redis each read
is revalidated against the conversation's version, see there why). Every
change (a commit, a summary, a clear) changes the cached copy at once and is
written behind the turn by one background writer, in order, grouped and
retried (:mod:`botgateway.history.commit_queue`). :meth:`Memory.commit` therefore
returns without waiting for the store; :meth:`Memory.clear` waits until the
clear is written; :meth:`Memory.flush` waits for everything, and
:meth:`Memory.aclose` drains the writer on shutdown (call it before the store
is closed).

Several processes on one Redis take turns in a conversation through its lease
(:mod:`botgateway.fleet.lease`): every change made while this process holds
the lease carries the lease's fencing token (``fences``), so a process that lost
the lease cannot change the history any more, and :meth:`Memory.settle` is how
a turn's changes reach the store before the lease is handed on.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog

from botgateway.backoff import Backoff
from botgateway.history.cache import DEFAULT_CACHED_CONVERSATIONS, HistoryCache
from botgateway.history.commit_queue import WRITE_BACKOFF, CommitQueue
from botgateway.history.summary import (
    SUMMARY_ACK,
    SUMMARY_HEADER,
    SUMMARY_INSTRUCTION,
    TOOL_RESULT_CHARS,
    build_summary_request,
    render_transcript,
    summary_text,
    summary_turn,
)
from botgateway.history.tokens import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    TOOL_CALL_OVERHEAD_TOKENS,
    estimate_message_tokens,
    estimate_text_tokens,
    estimate_tokens,
    fit_to_tokens,
    truncate_to_tokens,
)
from botgateway.stores.base import ConversationStore, HistoryWrite, Message, StoredTurn, VersionStep

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "SUMMARY_ACK",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTION",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "TOOL_RESULT_CHARS",
    "Memory",
    "Summarizer",
    "build_summary_request",
    "check_turn_messages",
    "estimate_message_tokens",
    "estimate_text_tokens",
    "estimate_tokens",
    "flatten",
    "render_transcript",
    "summary_text",
    "summary_turn",
    "trim_history",
    "truncate_to_tokens",
    "turn_tokens",
]

log = structlog.get_logger(__name__)

Summarizer = Callable[[list[Message]], Awaitable[str]]
"""Takes a complete chat request (system instruction + transcript) and returns the summary text."""


def turn_tokens(turn: StoredTurn) -> int:
    """Tokens of one stored turn."""
    return estimate_tokens(turn.messages)


def check_turn_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise ``ValueError`` unless ``messages`` is a whole turn a provider will accept back.

    Every message needs a ``role``; every ``tool`` message must answer a call of an
    earlier assistant message in the turn, and every call must have its result.
    """
    if not messages:
        raise ValueError("a turn needs at least one message")
    pending: dict[str, str] = {}
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in {"user", "assistant", "tool", "system", "developer"}:
            raise ValueError(f"message {index} has no valid role: {role!r}")
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                pending[str(call.get("id", ""))] = str((call.get("function") or {}).get("name", ""))
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            if call_id not in pending:
                raise ValueError(f"message {index} is a tool result for unknown call {call_id!r}")
            del pending[call_id]
    if pending:
        raise ValueError(f"tool calls without results: {', '.join(sorted(pending))}")


class Memory:
    """Per-conversation history within a token budget.

    Args:
        store: Where turns live.
        max_history_tokens: Estimated tokens of history sent to the model; compression starts past it.
        keep_recent_turns: The newest turns that are never summarized or dropped.
        summarizer: ``async (request_messages) -> summary``; usually ``LLMClient.complete``.
            ``None`` means: drop the oldest turns instead of summarizing.
        summary_timeout_s: A summary that takes longer counts as failed.
        hard_limit_factor: When summarizing fails, dropped turns are deleted from the store only
            if it holds more than this many times the budget (so a passing model outage does not
            cost the history, but the store does not grow without bound either).
        clock: Unix time for ``created_at``.
        cached_conversations: Conversations whose history is kept in memory (LRU); 0 reads each from the store.
        write_backoff: Pacing of the history writer's retries.
        fences: The fencing token of the conversation's lease this process holds (``None``: none; every
            change is then written unchecked, as with one process on SQLite).
    """

    def __init__(
        self,
        store: ConversationStore,
        *,
        max_history_tokens: int,
        keep_recent_turns: int,
        summarizer: Summarizer | None = None,
        summary_timeout_s: float = 30.0,
        hard_limit_factor: float = 4.0,
        clock: Callable[[], float] = time.time,
        cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS,
        write_backoff: Backoff = WRITE_BACKOFF,
        fences: Callable[[str], int | None] | None = None,
    ) -> None:
        if max_history_tokens <= 0:
            raise ValueError("max_history_tokens must be positive")
        if keep_recent_turns < 0:
            raise ValueError("keep_recent_turns must not be negative")
        self.store = store
        self.max_history_tokens = max_history_tokens
        self.keep_recent_turns = keep_recent_turns
        self.summarizer = summarizer
        self.summary_timeout_s = summary_timeout_s
        self.hard_limit_factor = hard_limit_factor
        self._clock = clock
        self._fences = fences
        self._locks: dict[str, list[Any]] = {}
        self._writer = CommitQueue(store, on_written=self._written, backoff=write_backoff)
        self._cache = HistoryCache(store, self._writer, max_conversations=cached_conversations, clock=clock)

    @asynccontextmanager
    async def _exclusive(self, conversation_id: str) -> AsyncIterator[None]:
        """One compression per conversation at a time in this process."""
        entry = self._locks.setdefault(conversation_id, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._locks.pop(conversation_id, None)

    async def history(self, conversation_id: str) -> list[Message]:
        """The conversation as OpenAI messages (no system message), compressed to the budget."""
        turns = await self._cache.turns(conversation_id)
        if sum(map(turn_tokens, turns)) <= self.max_history_tokens:
            return flatten(turns)
        async with self._exclusive(conversation_id):
            # Read again: another task may have compressed while we waited.
            turns = await self._cache.turns(conversation_id)
            if sum(map(turn_tokens, turns)) <= self.max_history_tokens:
                return flatten(turns)
            return self._fit(conversation_id, flatten(await self._compress(conversation_id, turns)))

    def _fit(self, conversation_id: str, messages: list[Message]) -> list[Message]:
        """``messages`` within the budget: the newest turns too, however long a message in them was."""
        tokens = estimate_tokens(messages)
        if tokens <= self.max_history_tokens:
            return messages
        fitted = fit_to_tokens(messages, self.max_history_tokens)
        log.warning(
            "memory.cut_to_fit",
            conversation=conversation_id,
            tokens_before=tokens,
            tokens_after=estimate_tokens(fitted),
            budget=self.max_history_tokens,
        )
        return fitted

    async def _compress(self, conversation_id: str, turns: list[StoredTurn]) -> list[StoredTurn]:
        total = sum(map(turn_tokens, turns))
        split = max(0, len(turns) - self.keep_recent_turns)
        # A summary turn among the "recent" ones still counts as old: it never needs protecting.
        while split < len(turns) and turns[split].is_summary:
            split += 1
        old, recent = turns[:split], turns[split:]
        previous = next((t for t in old if t.is_summary), None)
        to_fold = [t for t in old if not t.is_summary]
        if not to_fold:
            log.warning(
                "memory.over_budget",
                conversation=conversation_id,
                tokens=total,
                budget=self.max_history_tokens,
                note="the newest turns alone exceed the budget; their longest messages are cut in what is sent",
            )
            return self._drop_oldest(turns, recent)

        if self.summarizer is not None:
            summary = await self._summarize(conversation_id, previous, to_fold, recent)
            if summary is not None:
                self._change(HistoryWrite(conversation_id, "replace", summary, tuple(t.turn_id for t in old)))
                kept = [summary, *recent]
                log.info(
                    "memory.summarized",
                    conversation=conversation_id,
                    turns=len(to_fold),
                    tokens_before=total,
                    tokens_after=sum(map(turn_tokens, kept)),
                )
                return kept

        kept = self._drop_oldest(turns, recent)
        kept_ids = {t.turn_id for t in kept}
        dropped = [t.turn_id for t in turns if t.turn_id not in kept_ids]
        persist = self.summarizer is None or total > self.hard_limit_factor * self.max_history_tokens
        if persist and dropped:
            self._change(HistoryWrite(conversation_id, "replace", None, tuple(dropped)))
        log.info(
            "memory.dropped_oldest",
            conversation=conversation_id,
            turns=len(dropped),
            tokens_before=total,
            tokens_after=sum(map(turn_tokens, kept)),
            persisted=persist,
        )
        return kept

    def _drop_oldest(self, turns: list[StoredTurn], recent: list[StoredTurn]) -> list[StoredTurn]:
        """The deterministic fallback: drop the oldest whole turns (the summary last) until within budget."""
        protected = {t.turn_id for t in recent}
        order = [t for t in turns if not t.is_summary and t.turn_id not in protected]
        order += [t for t in turns if t.is_summary and t.turn_id not in protected]
        dropped: set[str] = set()
        total = sum(map(turn_tokens, turns))
        for victim in order:
            if total <= self.max_history_tokens:
                break
            dropped.add(victim.turn_id)
            total -= turn_tokens(victim)
        return [t for t in turns if t.turn_id not in dropped]

    async def _summarize(
        self,
        conversation_id: str,
        previous: StoredTurn | None,
        to_fold: list[StoredTurn],
        recent: list[StoredTurn],
    ) -> StoredTurn | None:
        """The new summary turn, or ``None`` when the summarizer failed."""
        assert self.summarizer is not None
        recent_tokens = sum(map(turn_tokens, recent))
        framing = turn_tokens(summary_turn(""))
        # At most half the budget, and no more than the protected turns leave; a floor keeps it useful.
        target = max(30, min(self.max_history_tokens // 2, self.max_history_tokens - recent_tokens - framing))
        request = build_summary_request(summary_text(previous) if previous else "", to_fold, target_tokens=target)
        try:
            text = await asyncio.wait_for(self.summarizer(request), self.summary_timeout_s)
        except TimeoutError:
            log.warning("memory.summary_failed", conversation=conversation_id, reason="timeout", timeout_s=self.summary_timeout_s)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure of the model falls back to dropping turns
            log.warning("memory.summary_failed", conversation=conversation_id, reason="error", error=f"{type(exc).__name__}: {exc}")
            return None
        if not isinstance(text, str) or not text.strip():
            log.warning("memory.summary_failed", conversation=conversation_id, reason="empty")
            return None
        return summary_turn(truncate_to_tokens(text.strip(), target), created_at=self._clock())

    async def commit(self, conversation_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        """Record one completed turn: in the history at once, in the store behind the turn (in order, whole).

        Raises ``ValueError`` when the messages are not a whole turn (for example a
        tool call without its result), which would make every later request fail.
        Raises :class:`~botgateway.stores.base.StoreError` once :meth:`aclose` ran.
        """
        check_turn_messages(messages)
        turn = StoredTurn(turn_id=turn_id, messages=tuple(copy.deepcopy(list(messages))), created_at=self._clock())
        self._change(HistoryWrite(conversation_id, "append", turn))

    async def clear(self, conversation_id: str) -> None:
        """Forget the conversation: at once in memory, and wait until the store has forgotten it too.

        Raises :class:`~botgateway.stores.base.StoreError` when the store refused it
        after the writer's retries; the clear stays queued and is written later.
        """
        ticket = self._change(HistoryWrite(conversation_id, "clear"))
        await self._writer.wait_written(ticket)
        log.info("memory.cleared", conversation=conversation_id)

    async def flush(self) -> None:
        """Wait until every change so far is in the store; raises as :meth:`clear` does."""
        await self._writer.flush()

    async def settle(self, conversation_id: str, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until the conversation's changes so far are in the store; False if not by then."""
        return await self._writer.settle(conversation_id, timeout_s)

    async def aclose(self) -> None:
        """Write what is still queued (bounded), then stop; later commits raise. Call before the store closes."""
        await self._cache.aclose()
        await self._writer.aclose()

    def _change(self, write: HistoryWrite) -> int:
        """Queue ``write`` for the store (with the lease's fencing token) and apply it to the cached copy; its ticket."""
        fence = self._fences(write.conversation_id) if self._fences is not None else None
        if fence is not None:
            write = dataclasses.replace(write, fence=fence)
        ticket = self._writer.submit(write)  # first: once closed this raises and nothing changes
        self._cache.apply(write)
        return ticket

    def _written(self, write: HistoryWrite, step: VersionStep | None) -> None:
        self._cache.written(write, step)


def trim_history(messages: Sequence[Message], max_tokens: int) -> list[Message]:
    """The newest whole turns of flattened history ``messages`` within ``max_tokens``.

    A turn begins at a ``user`` message (a summary pair too), so a tool result is
    never parted from its call. When even the newest turn alone is over, it is
    kept, cut to fit (:func:`~botgateway.history.tokens.fit_to_tokens`).
    """
    turns: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    kept: list[Message] = []
    for turn in reversed(turns):
        if kept and estimate_tokens(kept) + estimate_tokens(turn) > max_tokens:
            break
        kept[:0] = turn
    return fit_to_tokens(kept, max_tokens)


def flatten(turns: Iterable[StoredTurn]) -> list[Message]:
    """The turns' messages in order, as fresh dicts the caller may change."""
    return [copy.deepcopy(dict(message)) for turn in turns for message in turn.messages]
