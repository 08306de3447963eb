"""A resumed turn's card: the card its interrupted turn left open, taken over where the platform allows.

The resumed turn streams through :class:`ResumedSink`, a wrapper of its platform's sink. Its first card is not
created: the card left open is updated instead, so the asker's answer comes where the question's card already
is. Where the platform refuses that update (a Slack stream cannot be edited while it streams) the card is
finalized first (which ends such a stream) and updated again; where that fails too (the card is gone, or final
for good) it is closed with a note that the answer follows, its record is dropped, and the turn's card is a new
one in the same place. Every snapshot of the first part says "resumed after a restart" above the answer (its
preamble).

A sink with ways of its own to make a card (:class:`TakingOver`: Slack's native streams, its deferred answers) is
told at once that the card is taken over, and plans it as it sees fit (Slack: the answer complete in a new message,
the card left deleted then, since the dead process's calls still count against budgets no restarted process can
see); it is not replanned while it is the card left open.
When the turn's answer still goes out another way (the fallback), the card left open is closed first, saying that
the answer follows: a taken-over card is never left live, nor showing the answer twice.
"""

from __future__ import annotations

import dataclasses
from typing import NoReturn, Protocol, runtime_checkable

import structlog

from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.sink import (
    ArtifactSink,
    CardGone,
    CardHandle,
    CardOp,
    CardSink,
    CardTarget,
    PermanentError,
    Replanning,
    TransientError,
)
from botgateway.snapshot import CardSnapshot
from botgateway.stores.base import OpenCardStore
from botgateway.strings import t

__all__ = ["ResumedSink", "TakingOver", "resumed_sink"]

log = structlog.get_logger(__name__)


@runtime_checkable
class TakingOver(Protocol):
    """A sink that plans its cards' calls itself (more than one way to make them), told of a card it did not make."""

    def take_over(self, target: CardTarget) -> None:
        """``target``'s card is a message made elsewhere (by a process that died): plan its calls knowing so."""
        ...


class ResumedSink:
    """A :class:`~botgateway.sink.CardSink` whose first card is ``left``, the card the interrupted turn left open.

    Args:
        inner: The platform's sink; everything else is its (budgets, size, pictures).
        left: The card left open, as its record names it.
        store: Where the left card's record is dropped when a new card replaces it.
    """

    def __init__(self, inner: CardSink, left: CardHandle, store: OpenCardStore) -> None:
        self.platform = inner.platform
        """The inner sink's platform."""
        self.max_chars = inner.max_chars
        """The inner sink's size (the note is short)."""
        self._inner = inner
        self._left: CardHandle | None = left  # None once taken over, or given up for a new card
        self._first: CardHandle | None = left  # the card left open until it is known final (or closed)
        self._store = store
        if isinstance(inner, TakingOver):
            inner.take_over(left.target)

    def _noted(self, snapshot: CardSnapshot) -> CardSnapshot:
        if snapshot.part != 1:
            return snapshot
        return dataclasses.replace(snapshot, preamble=t(snapshot.locale, "resumed"))

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The inner sink's bucket for ``op``; the first card's creation is an update of the card left open."""
        return self._inner.rate_key("update" if op == "create" and self._left is not None else op, target)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """The first time, the card left open, showing ``snapshot``; after, a new card of the inner sink.

        A throttle or a transient error is raised as it came (the card's caller tries again, the left card still
        first); when the left card cannot be taken over, a :class:`~botgateway.sink.TransientError` has the caller
        try again, on the budget of a new card this time.
        """
        left = self._left
        if left is None:
            return await self._inner.create(target, self._noted(snapshot))
        # The card shows this turn from now on: its buttons (Stop) name this turn's id.
        left = dataclasses.replace(left, target=target)
        noted = self._noted(snapshot)
        try:
            return self._taken(await self._inner.update(left, noted))
        except CardGone:
            pass  # perhaps only while it streams: finalized, a Slack stream is a plain message again
        except PermanentError as exc:
            await self._give_up(left, str(exc), close=True)
        if await self._close(left):
            try:
                return self._taken(await self._inner.update(left, noted))
            except (CardGone, PermanentError):
                pass
        await self._give_up(left, "the card cannot be changed any more", close=False)  # finalizing was tried

    def _taken(self, handle: CardHandle) -> CardHandle:
        self._left = None
        self._first = handle
        return handle

    async def _close(self, left: CardHandle) -> bool:
        """Finalize ``left`` saying that the answer follows in a new message; whether the platform took it."""
        try:
            await self._inner.finalize(left, self._closing(left))
        except Exception as exc:  # gone for good: nothing shows it any more
            log.info("gateway.resume_close_failed", platform=self.platform, error=type(exc).__name__)
            return False
        return True

    async def _give_up(self, left: CardHandle, reason: str, *, close: bool) -> NoReturn:
        """A new card replaces ``left``: close it (when ``close``) and drop its record, then raise the
        :class:`~botgateway.sink.TransientError` that has the caller make the new card."""
        log.info("gateway.resume_new_card", platform=self.platform, card_id=left.card_id, reason=reason[:200])
        self._left = self._first = None
        if close:
            await self._close(left)
        await self._forget(left)
        raise TransientError("the card left open cannot be taken over; a new one is made")

    async def _forget(self, left: CardHandle) -> None:
        try:
            await self._store.remove_open_card(left.target.platform, left.card_id)
        except Exception as exc:
            log.warning("gateway.resume_forget_failed", card_id=left.card_id, error=type(exc).__name__)

    def _closing(self, left: CardHandle) -> CardSnapshot:
        locale = left.target.locale
        return CardSnapshot(status="failed", error=t(locale, "resumed_below"), locale=locale, seq=1 << 30)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """The card shows ``snapshot`` (noted on the first part)."""
        return await self._inner.update(handle, self._noted(snapshot))

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """The card's final ``snapshot`` (noted on the first part)."""
        final = await self._inner.finalize(handle, self._noted(snapshot))
        if self._first is not None and handle.card_id == self._first.card_id:
            self._first = None  # final: nothing left open to close
        return final

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """The inner sink's other way of posting ``snapshot`` (noted on the first part); the card left open, unless
        known final, is closed first saying the answer follows (its creation or its final may have timed out after
        the platform took it: it would stay live, or show the answer a second time)."""
        first, self._first, self._left = self._first, None, None
        if first is not None:
            first = dataclasses.replace(first, target=target)
            if await self._close(first):
                await self._forget(first)  # else left on record: the next start-up's recovery closes it
        await self._inner.fallback(target, self._noted(snapshot))

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """A picture delivered by the inner sink; nothing to place when the inner sink draws pictures itself."""
        if not isinstance(self._inner, ArtifactSink):
            return ArtifactPlacement()
        return await self._inner.ship_artifact(target, artifact, handle)


class _ReplanningResumedSink(ResumedSink):
    """A :class:`ResumedSink` over a sink with more than one way to make a call (Slack: a stream or an edit)."""

    def __init__(self, inner: Replanning, left: CardHandle, store: OpenCardStore) -> None:
        super().__init__(inner, left, store)  # type: ignore[arg-type]  # a Replanning here is always a CardSink too
        self._planner = inner

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The inner sink's other plan for ``op``; none while the card is the one left open (edited, its only way)."""
        if self._left is not None or self._first is not None:
            return False
        return self._planner.replan(op, target)


def resumed_sink(inner: CardSink, left: CardHandle, store: OpenCardStore) -> ResumedSink:
    """``inner`` taking over ``left`` for a resumed turn's first card; it replans only when ``inner`` can (the card
    streamer's patience for a creation depends on whether it can)."""
    if isinstance(inner, Replanning):
        return _ReplanningResumedSink(inner, left, store)
    return ResumedSink(inner, left, store)
