"""An alert card's content, and the sink its investigation streams through.

The card is one message for the group's whole life: the alert's section on top
(:func:`~botgateway.alerts.render.alert_section`, in the snapshot's
``preamble``), then an "Investigation" section with the investigation's tool
lines and answer. The investigation is a turn like any other, streamed by the
gateway's card streamer; :class:`InvestigationSink` lets it stream into the
card the alert already posted, and puts the alert's section, read fresh from
the Store at each update, above what it shows. A notification handled by
another replica meanwhile is therefore never painted over with an older status.
The investigation's final is drawn from the record once the record says how it
ended (:func:`ended`), footer included, so the card settles in its finished
state and a later redraw from the record shows the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from botgateway.alerts.records import AlertCard, Investigation, InvestigationStatus
from botgateway.alerts.render import alert_section, safe_url
from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.sink import ArtifactSink, CardHandle, CardOp, CardSink, CardTarget
from botgateway.snapshot import CardSnapshot, CardStatus
from botgateway.strings import t

__all__ = ["InvestigationSink", "card_snapshot", "ended", "shown_state"]


_ENDED_STATUS: dict[InvestigationStatus, CardStatus] = {"done": "done", "refused": "done", "stopped": "stopped"}
"""The card's status for an investigation that ended so; any other ending failed."""


def card_snapshot(card: AlertCard, *, locale: str, now: float, live: CardSnapshot | None = None) -> CardSnapshot:
    """What ``card`` shows now: its alert section, and its investigation (``live``: the running one's latest snapshot)."""
    inv = card.investigation
    # A final snapshot is never "investigating", whatever the record managed to say before it was drawn.
    running = inv is not None and inv.status == "running" and not (live is not None and live.final)
    found = {h.host: h for h in card.hosts if h.state == "found"}
    section = alert_section(card.group, locale=locale, now=now, investigating=running, hosts=found)
    link = safe_url(card.graph.link) if card.graph is not None and card.graph.link else None
    if link:
        section = f"{section}\n[{t(locale, 'alert_grafana')}]({link})"
    graph = (card.graph.view(),) if card.graph is not None else ()
    if inv is None:
        return CardSnapshot(status="done", preamble=section, locale=locale, artifacts=graph)
    preamble = f"{section}\n\n{t(locale, 'alert_investigation')}"
    if live is not None:
        return dataclasses.replace(live, preamble=preamble, artifacts=graph + live.artifacts)
    if running:
        return CardSnapshot(status="working", preamble=preamble, blocks=inv.blocks, locale=locale, artifacts=graph)
    status = _ENDED_STATUS.get(inv.status, "failed")
    error = inv.error or (t(locale, "interrupted") if inv.status == "interrupted" else "")
    return CardSnapshot(status=status, preamble=preamble, blocks=inv.blocks, answer=inv.answer, error=error,
                        footer=inv.footer, locale=locale, artifacts=graph)


def shown_state(card: AlertCard) -> tuple[object, ...]:
    """What of ``card``'s record its drawing depends on besides the clock: the group as last notified and the hosts
    found so far. A card drawn from one state and recorded in another is drawn again."""
    return (card.group.updated_at, tuple(h for h in card.hosts if h.state == "found"))


def ended(inv: Investigation, snapshot: CardSnapshot) -> Investigation:
    """``inv`` as the final ``snapshot`` of its card leaves it: how it ended, what it found, its footer.

    The footer (and the sources line in it) is kept as the final drew it: a redraw shows the answer as it was
    given, its sources' ages those of the answer.
    """
    status: InvestigationStatus = snapshot.status if snapshot.status in ("done", "failed", "stopped") else "failed"
    return dataclasses.replace(inv, status=status, blocks=snapshot.blocks, answer=snapshot.answer,
                               error=snapshot.error, footer=snapshot.footer)


class InvestigationSink:
    """A :class:`~botgateway.sink.CardSink` streaming an investigation into its alert's existing card.

    The card's first part is the alert card (``handle``): creating it edits the
    card instead, and every snapshot gets the alert's section on top. Further
    parts of a long answer are new cards of the inner sink, in the card's
    thread where it has one. ``compose`` of the first part's final records how
    the investigation ended before it draws the card (see
    :class:`~botgateway.alerts.investigation.Investigator`). That final snapshot,
    and the handle the platform left, are kept in :attr:`final` for the
    investigator to record once the turn has ended.
    """

    def __init__(
        self,
        inner: CardSink,
        handle: CardHandle,
        *,
        compose: Callable[[CardSnapshot], Awaitable[CardSnapshot]],
        thread_id: str | None = None,
    ) -> None:
        """``compose``: the card's snapshot around the investigation's; ``thread_id``: where later parts go."""
        self.platform = inner.platform
        """The inner sink's platform."""
        self.max_chars = inner.max_chars
        """The inner sink's size; the alert's section is bounded, and a longer answer continues in a new part."""
        self.final: tuple[CardHandle, CardSnapshot] | None = None
        """The first part's final snapshot and the handle the platform left, once finalized."""
        self._inner = inner
        self._handle = handle
        self._compose = compose
        self._thread_id = thread_id

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The inner sink's buckets; the card exists, so its "create" is an edit."""
        return self._inner.rate_key("update" if op == "create" else op, target)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """The alert's card, edited to show ``snapshot`` (a later part: a new card in the card's thread)."""
        if snapshot.part > 1:
            return await self._inner.create(dataclasses.replace(target, thread_id=self._thread_id), snapshot)
        # The turn's id, and what its target carries for recovery (the alert above an "interrupted" note): the
        # streamer records the card as open under the handle this returns.
        shown = dataclasses.replace(self._handle.target, turn_id=target.turn_id,
                                    extra={**self._handle.target.extra, **target.extra})
        handle = dataclasses.replace(self._handle, target=shown)
        return await self._inner.update(handle, await self._compose(snapshot))

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show ``snapshot`` under the alert's section."""
        if snapshot.part > 1:
            return await self._inner.update(handle, snapshot)
        return await self._inner.update(handle, await self._compose(snapshot))

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` under the alert's section."""
        if snapshot.part > 1:
            return await self._inner.finalize(handle, snapshot)
        done = await self._inner.finalize(handle, await self._compose(snapshot))
        self.final = (done, snapshot)
        return done

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """A picture of the investigation, delivered by the inner sink for the alert's card (into its thread)."""
        if not isinstance(self._inner, ArtifactSink):
            return ArtifactPlacement()  # the inner sink draws pictures from the snapshot, if at all
        return await self._inner.ship_artifact(self._handle.target, artifact, self._handle)

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """The card cannot be edited: the inner sink posts the snapshot another way, alert section included."""
        if snapshot.part > 1:
            await self._inner.fallback(dataclasses.replace(target, thread_id=self._thread_id), snapshot)
            return
        await self._inner.fallback(target, await self._compose(snapshot))
        if snapshot.final:
            self.final = (self._handle, snapshot)
