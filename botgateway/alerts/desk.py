"""The alert desk: Alertmanager notifications in, one card per alert group and destination out.

For each destination of the routes a notification matches (the first route
naming a destination takes it there), the desk folds the notification into
the group's record in the Store under the record's fleet-wide lock, then posts
the card or edits it: new alerts join it, resolved ones are marked, a repeat
is counted on it, never posted again. The record is written before any
platform call and again as soon as the card is posted, so a failed post loses
nothing (the next notification posts the card) and a posted card is never
posted twice. A platform that cannot edit its messages (a DingTalk robot
message) gets a new message per change of the group, and none for a repeat.

A route with ``investigate: true`` starts one read-only investigation per new
alert group (:mod:`botgateway.alerts.investigation`). While it streams into
the card, the desk only records new notifications: the investigation's next
update reads them, so two writers never race on one card. A notification
folded after its final was drawn is shown by the process that ran it once the
final has landed (another replica, which sees the end on record, may edit the
card itself in the meantime). An investigation whose process is gone (no
heartbeat) counts as interrupted. The card's
conversation is the one a reply to the card continues (a Slack thread reply; a
DingTalk message quoting the card), so follow-ups have the alert and the
investigation in their context. Card calls draw from the same rate budgets
as answers.

After each notification, the hosts its alerts name that are not identified
yet are looked up in the background, as the route's principal, and shown on
the card once found (:mod:`botgateway.alerts.host_lookup`); so is the graph of
what fired (:mod:`botgateway.alerts.graphs`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog

from botgateway.alerts.graphs import AlertGrapher, GraphKeeper
from botgateway.alerts.group import fold as fold_notification
from botgateway.alerts.group import group_ref
from botgateway.alerts.host_lookup import HostKeeper
from botgateway.alerts.investigation import Investigator
from botgateway.alerts.lock import GroupLocks
from botgateway.alerts.payload import Notification
from botgateway.alerts.records import AlertCard, CardRecords, Investigation, card_key
from botgateway.alerts.route_tools import RouteTools, ToolExecutor
from botgateway.alerts.routing import routes_for
from botgateway.alerts.show import CALL_DEADLINE_S, CardShower
from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.config import AccessConfig, AlertRouteConfig, AlertsConfig
from botgateway.destinations import Destination, parse_destination
from botgateway.stores.base import AuditStore, DocumentStore, InstanceStore, LeaseStore, Message
from botgateway.unprompted import Channels

__all__ = ["AlertDesk", "AlertStore"]

log = structlog.get_logger(__name__)

STALE_INVESTIGATION_S = 1800.0
"""An investigation still "running" on record after this long is over, whatever its process says."""

CLOSE_WAIT_S = 10.0
"""At shutdown, deliveries in progress get this long to finish before they are cancelled."""


class AlertStore(DocumentStore, LeaseStore, InstanceStore, AuditStore, Protocol):
    """The part of the Store the desk uses: the card records (documents), their fleet-wide locks (leases), the
    heartbeats that say whether an investigation's process still runs, and the audit trail (host lookups)."""


class AlertDesk:
    """Folds notifications into their groups' cards (see the module docstring)."""

    def __init__(
        self,
        *,
        config: AlertsConfig,
        store: AlertStore,
        budget: RateBudget,
        channels: Channels,
        read_only_tools: Callable[[], frozenset[str]],
        instance_id: str,
        seed: Callable[[str, str, Sequence[Message]], Awaitable[None]] | None = None,
        grapher: AlertGrapher | None = None,
        tools: ToolExecutor | None = None,
        access: AccessConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``read_only_tools``: the tools an investigation may be offered (read per investigation: MCP tools come late);
        ``seed(conversation, turn_id, messages)``: commits a turn to a conversation's history (the memory's commit):
        the card of an alert nobody investigates starts its conversation with the alert as context;
        ``grapher``: draws what fired (Prometheus configured), for the card's graph;
        ``tools``: the tool registry the hosts the alerts name are looked up with (None: they are not), as the
        ``access`` policy lets each route's role."""
        self._config = config
        self._store = store
        self._channels = channels
        self._instance_id = instance_id
        self._clock = clock
        # A lease outlives the longest card call made while it is held: a slow post never lets a second writer in.
        locks = GroupLocks(store, instance_id, ttl_s=2 * CALL_DEADLINE_S + 30)
        self._records = CardRecords(store, locks, keep_s=config.keep_days * 86400.0)
        self._shower = CardShower(channels=channels, budget=budget, records=self._records, locale=config.locale,
                                  seed=seed, clock=clock)
        self._investigator = Investigator(channels=channels, records=self._records, shower=self._shower,
                                          read_only_tools=read_only_tools, locale=config.locale, clock=clock)
        self._graphs = GraphKeeper(grapher, channels=channels, records=self._records, locale=config.locale,
                                   redraw=self._redraw, grafana_url=config.grafana_url) if grapher is not None else None
        self._hosts = HostKeeper(RouteTools(tools, access=access, audit=store), channels=channels,
                                 records=self._records, locale=config.locale, redraw=self._redraw,
                                 clock=clock) if tools is not None else None
        self._tasks = BackgroundTasks()

    def accept(self, notification: Notification) -> int:
        """Deliver ``notification`` in the background to each destination of the routes it matches; how many."""
        taken: dict[str, AlertRouteConfig] = {}
        for route in routes_for(self._config.routes, notification):
            for dest in route.to:
                taken.setdefault(dest, route)  # one card per destination: the first route naming it takes it
        for dest, route in taken.items():
            self._tasks.spawn(self.deliver(route, parse_destination(dest), notification), name=f"alert:{dest}")
        if not taken:
            log.info("alerts.unrouted", group_key=notification.group_key[:200], status=notification.status)
        return len(taken)

    async def deliver(self, route: AlertRouteConfig, dest: Destination, notification: Notification) -> None:
        """Fold ``notification`` into its group's card in ``dest``, show it and start its investigation when new.

        Returns once the card is shown and any investigation scheduled (its outcome is recorded by a task of its
        own); never raises (logged).
        """
        try:
            started = await self._fold_and_show(route, dest, notification)
            key = card_key(str(dest), notification.group_key)
            if started is not None:
                self._tasks.spawn(self._investigator.run(route, dest, key, started), name=f"investigation:{dest}")
            if self._graphs is not None and any(a.generator_url for a in notification.alerts):
                self._tasks.spawn(self._graphs.refresh(key, dest), name=f"alert-graph:{dest}")
            if self._hosts is not None:
                self._tasks.spawn(self._hosts.identify(route, dest, key), name=f"alert-hosts:{dest}")
        except Exception as exc:
            log.error("alerts.delivery_failed", route=route.name, destination=str(dest), error=type(exc).__name__,
                      exc_info=True)

    async def _fold_and_show(self, route: AlertRouteConfig, dest: Destination, n: Notification) -> AlertCard | None:
        """The record updated and its card shown; returns the card when its investigation is to start now."""
        if not self._channels.available(dest.platform):
            log.warning("alerts.destination_unavailable", route=route.name, destination=str(dest),
                        reason=f"the {dest.platform} adapter is not running in this process")
            return None
        key = card_key(str(dest), n.group_key)
        now = self._clock()
        async with self._records.hold(key):
            card = await self._records.load(key)
            group, change = fold_notification(card.group if card else None, n, now)
            card = dataclasses.replace(card, group=group) if card else AlertCard(
                route=route.name, destination=str(dest), group=group)
            card = await self._settle_investigation(key, card, now)
            start = route.investigate and card.investigation is None and group.status == "firing"
            if start:
                card = dataclasses.replace(card, investigation=Investigation(
                    status="running", started_at=now, owner=self._instance_id))
            await self._records.save(key, card)  # before any platform call: the state survives a failed post
            log.info("alerts.folded", route=route.name, destination=str(dest), change=change,
                     status=group.status, alerts=len(group.alerts), ref=group_ref(group.group_key))
            return await self._show(key, dest, card, change=change, start=start)

    async def _show(self, key: str, dest: Destination, card: AlertCard, *, change: str, start: bool) -> AlertCard | None:
        """Post or edit the card as the change asks; the posted card when its investigation is to start now."""
        editable = self._channels.adapter(dest.platform).edits_in_place
        if card.handle is None:
            posted = await self._shower.post(key, dest, card, seed=card.investigation is None)
            if posted.handle is None:
                if start:  # the next notification posts the card, and investigates
                    await self._records.save(key, dataclasses.replace(posted, investigation=None))
                return None
            if not start or editable:
                # An edit ends the post as a card (the investigation streams into it instead when one starts);
                # a robot message is sent by its "edit": the alert shows now, the investigation follows.
                if not start:
                    await self._records.save(key, await self._shower.edit(key, dest, posted))
                return posted if start else None
            await self._records.save(key, await self._shower.edit(key, dest, posted))
            return posted
        inv = card.investigation
        if inv is not None and (inv.status == "running" or self._investigator.running_here(key)):
            # Its streaming updates show this notification (they read the record); one that has just ended here
            # (its final on its way to the card) shows it again once the final has landed.
            return None
        if change == "repeat" and not editable:
            return None  # counted, shown at the next change: a repeat is never a new message
        await self._records.save(key, await self._shower.edit(key, dest, card))
        return None

    async def _redraw(self, key: str, dest: Destination, card: AlertCard) -> None:
        """Show ``card`` again for its graph or its hosts: an edit, unless its investigation's own updates will."""
        if not self._channels.adapter(dest.platform).edits_in_place:
            return  # a new robot message for a picture or a host alone would be noise: the next change shows it
        async with self._records.hold(key):
            current = await self._records.load(key) or card
            inv = current.investigation
            if current.handle is None or (inv is not None and (inv.status == "running" or
                                                               self._investigator.running_here(key))):
                return
            await self._records.save(key, await self._shower.edit(key, dest, current))

    async def _settle_investigation(self, key: str, card: AlertCard, now: float) -> AlertCard:
        """A "running" investigation whose process is gone, or that ran too long, is recorded as interrupted."""
        inv = card.investigation
        if inv is None or inv.status != "running":
            return card
        if inv.owner == self._instance_id:
            alive = self._investigator.running_here(key)  # a restart under the same id ends what ran before it
        else:
            try:
                alive = inv.owner in await self._store.live_instances()
            except Exception as exc:  # unknown: leave it running; the age rule still ends it
                log.warning("alerts.liveness_unknown", key=key, error=type(exc).__name__)
                alive = True
        if alive and now - inv.started_at < STALE_INVESTIGATION_S:
            return card
        log.info("alerts.investigation_interrupted", key=key, owner=inv.owner)
        return dataclasses.replace(card, investigation=dataclasses.replace(inv, status="interrupted"))

    async def aclose(self) -> None:
        """Give the deliveries in progress a moment, then stop them (investigations are the gateway's turns)."""
        await self._tasks.wait(CLOSE_WAIT_S)
        await self._tasks.aclose()
