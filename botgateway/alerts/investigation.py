"""A new alert group's investigation: one read-only turn streaming into the group's card.

It runs as ``alerts:<route>`` with the route's role, offered only read-only
tools, through the gateway like any question (limits, audit). The turn streams
into the card through :class:`~botgateway.alerts.card.InvestigationSink`,
whose updates read the group fresh from the Store, so a notification folded
meanwhile (here or on another replica) shows at the next update without
anyone else writing to a card that is streaming. The card's final is drawn
only after the record says how the investigation ended (under the record's
lock): the card settles as finished, and so does any later redraw from the
record, footer included. Once the turn has ended the handle the platform left
is recorded, and when the record changed after the final was composed (a
notification, a host identified), the card is shown once more.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import structlog

from botgateway.alerts.card import InvestigationSink, card_snapshot, ended, shown_state
from botgateway.alerts.question import investigation_question
from botgateway.alerts.records import AlertCard, CardRecords
from botgateway.alerts.show import CardShower
from botgateway.config import AlertRouteConfig
from botgateway.destinations import Destination
from botgateway.messages import Submission
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t
from botgateway.unprompted import Channels, UnpromptedTurn, gateway_principal

__all__ = ["Investigator"]

log = structlog.get_logger(__name__)

RECORD_END_WAIT_S = 10.0
"""Longest the investigation's final waits to put its end on record (another holder of the record's lock, a slow
Store): it is inside a card call. Past it the card is drawn finished all the same, and the turn's end records it."""


class Investigator:
    """Starts investigations and records how they end; knows which ones run in this process."""

    def __init__(
        self,
        *,
        channels: Channels,
        records: CardRecords,
        shower: CardShower,
        read_only_tools: Callable[[], frozenset[str]],
        locale: str,
        clock: Callable[[], float],
    ) -> None:
        self._channels = channels
        self._records = records
        self._shower = shower
        self._read_only = read_only_tools
        self._locale = locale
        self._clock = clock
        self._running: set[str] = set()  # keys of the investigations streaming in this process

    def running_here(self, key: str) -> bool:
        """Whether the investigation of record ``key`` runs in this process now."""
        return key in self._running

    async def run(self, route: AlertRouteConfig, dest: Destination, key: str, card: AlertCard) -> None:
        """Investigate ``card``'s group into its card: its end is recorded before the card's final is drawn."""
        assert card.handle is not None
        shown_at = [shown_state(card)]  # the record as the card's last update showed it

        async def compose(snapshot: CardSnapshot) -> CardSnapshot:
            if snapshot.final:  # the end is on record before the final is drawn from it
                current = await self._record_end(key, card, snapshot)
            else:
                try:
                    current = await self._records.load(key) or card
                except Exception as exc:  # the card still streams, with the group as it was
                    log.warning("alerts.record_unavailable", key=key, error=type(exc).__name__)
                    current = card
            shown_at.append(shown_state(current))
            return card_snapshot(current, locale=self._locale, now=self._clock(), live=snapshot)

        # The card has a thread when the adapter adopted one (its conversation is the thread's, not "alert:…").
        thread = None if card.conversation_id.startswith("alert:") else card.handle.card_id
        sink = InvestigationSink(self._channels.sink(dest.platform), card.handle, compose=compose, thread_id=thread)
        assert card.investigation is not None
        closed = dataclasses.replace(card, investigation=dataclasses.replace(card.investigation, status="interrupted"))
        preamble = card_snapshot(closed, locale=self._locale, now=self._clock()).preamble
        # Kept on the target: recovery closing this card after a crash shows the alert (no longer being
        # investigated) above its note.
        target = dataclasses.replace(card.handle.target, thread_id=None,
                                     extra={**card.handle.target.extra, "preamble": preamble})
        turn = UnpromptedTurn(
            principal=gateway_principal("alerts", route.name), role=route.role,
            question=investigation_question(card.group, locale=self._locale), conversation_id=card.conversation_id,
            target=target, tools=self._read_only(),
        )
        self._running.add(key)
        try:
            submission = await self._channels.ask(turn, sink=sink)
            await self._started(route, dest, key, submission)
            if submission.done is not None and submission.status != "refused":
                await asyncio.shield(submission.done)
            await self._ended(dest, key, sink, shown_at[-1])
        finally:
            self._running.discard(key)

    async def _started(self, route: AlertRouteConfig, dest: Destination, key: str, submission: Submission) -> None:
        """Record the turn's id, or its refusal (shown on the card: the alert stays, the investigation says why)."""
        refused = submission.status == "refused"
        async with self._records.hold(key):
            card = await self._records.load(key)
            if card is None or card.investigation is None:
                return
            inv = card.investigation
            if refused:
                note = t(self._locale, "alert_investigation_refused", reason=submission.message)
                inv = dataclasses.replace(inv, status="refused", error=note)
            else:
                inv = dataclasses.replace(inv, turn_id=submission.turn_id)
            card = dataclasses.replace(card, investigation=inv)
            await self._records.save(key, card)
            if refused:
                log.warning("alerts.investigation_refused", route=route.name, reason=submission.message[:200])
                await self._records.save(key, await self._shower.edit(key, dest, card))
            else:
                log.info("alerts.investigating", route=route.name, destination=str(dest), turn_id=submission.turn_id)

    async def _record_end(self, key: str, card: AlertCard, snapshot: CardSnapshot) -> AlertCard:
        """Record how the investigation ended, as its card's final ``snapshot`` says; the record the final is drawn
        from. A record that cannot be written still gives a finished card (the turn's end records it again)."""
        try:
            async with asyncio.timeout(RECORD_END_WAIT_S), self._records.hold(key):
                current = await self._records.load(key)
                if current is None or current.investigation is None:
                    return current or card
                current = dataclasses.replace(current, investigation=ended(current.investigation, snapshot))
                await self._records.save(key, current)
                return current
        except Exception as exc:  # TimeoutError included
            log.warning("alerts.record_unavailable", key=key, error=type(exc).__name__)
            assert card.investigation is not None
            return dataclasses.replace(card, investigation=ended(card.investigation, snapshot))

    async def _ended(self, dest: Destination, key: str, sink: InvestigationSink, shown_at: tuple[object, ...]) -> None:
        """Keep the handle the final left (and the end, if the final could not record it); show the card again
        when the group changed (or a host was identified) after its final was composed."""
        if sink.final is None:
            return  # refused, or ended before its card was ever final (the record says so at the next notification)
        handle, snapshot = sink.final
        async with self._records.hold(key):
            card = await self._records.load(key)
            if card is None or card.investigation is None:
                return
            stored = dataclasses.replace(handle, target=card.handle.target) if card.handle is not None else handle
            inv = ended(card.investigation, snapshot)
            card = dataclasses.replace(card, investigation=inv, handle=stored)
            await self._records.save(key, card)
            if shown_state(card) != shown_at:
                await self._records.save(key, await self._shower.edit(key, dest, card))
            self._running.discard(key)  # under the lock: a notification folded from now on is the desk's to show
        log.info("alerts.investigated", key=key, status=inv.status)


