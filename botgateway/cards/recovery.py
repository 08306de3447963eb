"""No card spins forever: heartbeats, and the closing of cards whose process is gone.

Every card is on record as open, owned by the instance id of the gateway
process streaming it, until it is final. While running, each process sends
heartbeats to the Store and periodically finalizes the open cards whose owner
has stopped sending them ("interrupted, please ask again"), so a crashed
replica's cards are closed by the replicas still running, and a restarted
process closes what its predecessor left open.

An instance id may outlive its process (:mod:`botgateway.instance`): a process
restarted under the same id finds its predecessor's cards owned by itself and
still "live" (the dead process's heartbeat has not expired, and the new one
renews it). So at start-up it takes care of them at once: cards of its own id
created before it started that no running turn of it holds.

An orphan is not always closed: the gateway's ``resume`` (:mod:`botgateway.turns.resume`)
may run its turn again, once, into the same card ("resumed after a restart"),
when the card's record says that turn may run again; else the card is closed
with the reason ``resume`` gives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import structlog

from botgateway.backoff import Backoff
from botgateway.budget import RateBudget
from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.config import GatewayConfig
from botgateway.sink import CardHandle, CardSink, CardTarget, target_from_dict
from botgateway.snapshot import CardSnapshot
from botgateway.stores.base import ClaimStore, InstanceStore, OpenCard, OpenCardStore
from botgateway.strings import t

__all__ = ["Recovery", "RecoveryStore", "Resume", "target_from_open_card"]

log = structlog.get_logger(__name__)

RECOVER_ATTEMPTS = 3
"""Tries to finalize one left-open card when the platform throttles or fails transiently."""
RECOVER_BACKOFF = Backoff(base_s=0.5, jitter=(1.0, 1.0))
"""Waits between those tries (a throttle's Retry-After wins)."""
RECOVER_MAX_WAIT_S = 10.0
"""Closing one orphan gives up after this long: start-up does not stall on an old card."""
RECOVER_CLAIM_TTL_S = 120.0
"""One replica claims an orphaned card before closing it; others retry it only after this long."""


Resume: TypeAlias = Callable[[OpenCard, CardSink], Awaitable[str | None]]
"""Runs an orphan's turn again into it (``sink``: its platform's): None when the card is taken care of (its turn
runs again, here or in the process that claimed it first), else the note the card is closed with, saying why not."""


def target_from_open_card(card: OpenCard) -> CardTarget:
    """Rebuild the :class:`CardTarget` an open card was stored with (unknown keys ignored)."""
    data = card.target.get("target", card.target)
    return target_from_dict(data if isinstance(data, Mapping) else {}, platform=card.platform, turn_id=card.turn_id)


class RecoveryStore(OpenCardStore, InstanceStore, ClaimStore, Protocol):
    """The part of the Store recovery uses: the open cards, the heartbeats of their owners, and the claim one
    replica makes on an orphan before closing it."""


class Recovery:
    """This process's heartbeats, and the closing of other processes' orphaned cards."""

    def __init__(
        self,
        store: RecoveryStore,
        budget: RateBudget,
        config: GatewayConfig,
        *,
        instance_id: str,
        is_running: Callable[[str], bool],
        resume: Resume | None = None,
    ) -> None:
        """``is_running(turn_id)`` tells whether a turn is this process's own, still running; ``resume`` runs an
        orphan's turn again when it may (``None``: every orphan is closed as interrupted)."""
        self.instance_id = instance_id
        """This process's id: the owner of its open cards."""
        self._resume = resume
        self._store = store
        self._budget = budget
        self._config = config
        self._is_running = is_running
        self._heartbeat: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._beating = True
        self._closed = False
        self._started_at = time.time()
        """Cards of this id created before this are a previous process's (the id outlived it)."""

    async def start(self) -> None:
        """Tell the store this process is live, now and every ``heartbeat_s`` until :meth:`aclose`. Idempotent."""
        if self._heartbeat is not None or self._closed:
            return
        await self._beat()
        self._heartbeat = asyncio.create_task(self._beat_forever(), name=f"gateway-heartbeat-{self.instance_id[:8]}")

    def watch(self, sinks: Mapping[str, CardSink], *, older_than_s: float = 0.0) -> None:
        """Run :meth:`recover_open_cards` every ``recover_interval_s`` until :meth:`aclose`.

        So the cards of a replica that crashed while this one keeps running are
        closed without waiting for a restart. Calling it again replaces the sinks.
        """
        if self._closed:
            return
        if self._watcher is not None:
            self._watcher.cancel()
        self._watcher = asyncio.create_task(self._watch(dict(sinks), older_than_s), name=f"gateway-recovery-{self.instance_id[:8]}")

    async def recover_open_cards(
        self, sinks: Mapping[str, CardSink], *, older_than_s: float = 0.0, at_start: bool = False
    ) -> int:
        """Resume or finalize cards left streaming by a process that is gone; returns how many were resumed or closed.

        A card is an orphan when its owner no longer sends heartbeats; a card
        without an owner (written by an older release) when it is older than
        ``older_than_s``. This process's own cards are never touched; ``at_start``
        (the first pass after start-up), the cards a previous process of the same
        instance id left are taken care of too, without waiting for a heartbeat.
        Each orphan's turn is run again when ``resume`` says it may; otherwise the
        card is finalized as failed with a short note saying why ("interrupted,
        please ask again"), retried a few times when throttled or failing
        transiently. A card the sink still cannot finalize (deleted, expired)
        is forgotten. Cards of platforms without a sink here are left for the
        process that serves them.
        """
        try:
            cards = await self._store.open_cards()
        except Exception as exc:
            log.error("gateway.recover_failed", error=type(exc).__name__, detail=str(exc)[:200])
            return 0
        # Read after the cards: a process beats before it creates any card, so every owner seen above is listed if live.
        live = await self._live_owners(cards)
        now = time.time()
        closed = resumed = 0
        for card in cards:
            if not self._orphaned(card, live, now, older_than_s, at_start):
                continue
            sink = sinks.get(card.platform)
            if sink is None:
                log.info("gateway.recover_skipped", platform=card.platform, card_id=card.card_id, reason="adapter not running")
                continue
            if not await self._claim(card):
                continue
            note = await self._resumed(card, sink)
            if note is None:
                resumed += 1
            elif await self._finalize(card, sink, note):
                closed += 1
        if cards:
            log.info("gateway.recovered", open_cards=len(cards), finalized=closed, resumed=resumed)
        return closed + resumed

    async def aclose(self) -> None:
        """Stop watching and beating, and drop this process's heartbeat: its cards left open are orphans now."""
        self._closed = True
        await _cancel_task(self._watcher)
        if self._heartbeat is None:
            return
        heartbeat, self._heartbeat = self._heartbeat, None
        await _cancel_task(heartbeat)
        try:
            async with asyncio.timeout(5):
                await self._store.forget_instance(self.instance_id)
        except Exception as exc:  # the heartbeat then simply expires
            log.warning("gateway.forget_instance_failed", error=type(exc).__name__)

    async def stop_watching(self) -> None:
        """Stop the periodic recovery (shutdown begins); heartbeats go on until :meth:`aclose`, none restarts."""
        self._closed = True
        await _cancel_task(self._watcher)

    async def _beat(self) -> None:
        try:
            await self._store.heartbeat(self.instance_id, self._config.instance_ttl_s)
        except Exception as exc:
            # Logged once per outage: the beat is retried every heartbeat_s anyway.
            if self._beating:
                log.warning("gateway.heartbeat_failed", error=type(exc).__name__, detail=str(exc)[:200])
            self._beating = False
            return
        if not self._beating:
            log.info("gateway.heartbeat_restored")
        self._beating = True

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.heartbeat_s)
            await self._beat()

    async def _watch(self, sinks: Mapping[str, CardSink], older_than_s: float) -> None:
        while True:
            await asyncio.sleep(self._config.recover_interval_s)
            try:
                await self.recover_open_cards(sinks, older_than_s=older_than_s)
            except Exception as exc:  # the next round tries again
                log.error("gateway.recover_failed", error=type(exc).__name__, detail=str(exc)[:200])

    async def _live_owners(self, cards: Sequence[OpenCard]) -> set[str] | None:
        """The live process ids, when some card has another owner; None when the store cannot tell."""
        if not any(card.owner and card.owner != self.instance_id for card in cards):
            return set()
        try:
            return await self._store.live_instances()
        except Exception as exc:
            log.warning("gateway.liveness_unknown", error=type(exc).__name__, detail=str(exc)[:200])
            return None

    def _orphaned(self, card: OpenCard, live: set[str] | None, now: float, older_than_s: float, at_start: bool) -> bool:
        if self._is_running(card.turn_id):
            return False
        if card.owner == self.instance_id:
            # Made before this process started: by the process this one replaces, under the same id.
            return at_start and card.created_at < self._started_at
        if card.owner:
            # When liveness is unknown (store hiccup), sparing a card beats closing a live answer.
            return live is not None and card.owner not in live
        return now - card.created_at >= older_than_s

    async def _claim(self, card: OpenCard) -> bool:
        """Whether this process should close ``card`` (several replicas may find the same orphan at once)."""
        try:
            # Per turn too: a card whose resumed turn was interrupted again is the same card, with another turn.
            return await self._store.claim(f"recover:{card.platform}:{card.card_id}:{card.turn_id}", RECOVER_CLAIM_TTL_S)
        except Exception:
            return True  # closing a card twice beats leaving it spinning

    async def _resumed(self, card: OpenCard, sink: CardSink) -> str | None:
        """None when ``card``'s turn runs again (here or elsewhere); else the note it is closed with."""
        if self._resume is None:
            return t(target_from_open_card(card).locale, "interrupted")
        try:
            return await self._resume(card, sink)
        except Exception as exc:  # a card that cannot be resumed is still closed
            log.exception("gateway.resume_failed", card_id=card.card_id, error=type(exc).__name__)
            return t(target_from_open_card(card).locale, "interrupted")

    async def _finalize(self, card: OpenCard, sink: CardSink, note: str) -> bool:
        """Close one orphan as failed, saying ``note``; its record is dropped whatever happens (a card that cannot be
        closed never will be)."""
        target = target_from_open_card(card)
        # A card that shows outside data above its turn (an alert's status) keeps it: its turn saved it on the target.
        snapshot = CardSnapshot(status="failed", error=note, locale=target.locale, seq=1 << 30,
                                preamble=str(target.extra.get("preamble") or ""))
        handle = CardHandle(card_id=card.card_id, target=target, data=dict(card.target.get("handle", {}) or {}))
        # A restart often meets a throttled platform: a card dropped here would spin forever, so throttles are waited out.
        caller = CardCaller(
            self._budget,
            lambda op: sink.rate_key(op, target),
            owner=f"recover-{card.card_id}",
            platform=card.platform,
            backoff=RECOVER_BACKOFF,
            call_timeout_s=RECOVER_MAX_WAIT_S,
        )

        async def finalize() -> None:
            await sink.finalize(handle, snapshot)

        outcome = await caller.call(
            "finalize", finalize, deadline=time.monotonic() + RECOVER_MAX_WAIT_S, attempts=RECOVER_ATTEMPTS
        )
        if outcome is not CallOutcome.OK:
            log.warning("gateway.recover_card_failed", platform=card.platform, card_id=card.card_id, error=outcome.value)
        try:
            await self._store.remove_open_card(card.platform, card.card_id)
        except Exception as exc:
            log.warning("gateway.recover_forget_failed", card_id=card.card_id, error=type(exc).__name__)
        return outcome is CallOutcome.OK


async def _cancel_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait([task])  # unlike ``await task``, a cancellation of the caller still propagates
