"""Which host is what on an alert card: a short, bounded lookup after a notification, shown when it lands.

An alert names its host by address (``instance="10.0.2.11:9100"``); the
investigation, when the route has one, identifies the first alert's host in
its answer, but a host that joins the group later was only ever shown by its
labels. After each notification the desk hands the card to
:class:`HostKeeper`, which looks up the hosts of the group's alerts not
identified yet, with the inventory's own lookup tool (``find_resource``, else
``find_server``) called as the route's principal (:mod:`.route_tools`: the
role's decision and scopes, the registry's checks, the audit trail), and
records on the card's record what each host is (:mod:`.known_hosts`). Every
drawing of the card then shows it beside the alert's line; the card is drawn
again once the lookup lands, unless its investigation's updates will draw it.

It never delays the card: it runs after the card was posted or edited. It is
bounded: at most :data:`MAX_HOSTS_PER_NOTIFICATION` hosts per notification, at
most :data:`MAX_LOOKUPS_PER_GROUP` lookups over a group's life, each call within
its timeout. A host being looked up is recorded first, so a second notification
(here, or on another replica) does not ask for it again. A lookup that fails
leaves the card as it was (asked again at a later notification, while the
group's lookups last); one that finds nothing is not asked again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from botgateway.alerts.group import group_ref
from botgateway.alerts.known_hosts import KnownHost, host_of_alert
from botgateway.alerts.records import AlertCard, CardRecords
from botgateway.alerts.route_tools import CALL_TIMEOUT_S, RouteCall, RouteTools
from botgateway.config import AlertRouteConfig
from botgateway.destinations import Destination
from botgateway.sink import CardTarget
from botgateway.tooling import ToolOutcome
from botgateway.unprompted import Channels

__all__ = ["LOOKUP_TOOLS", "MAX_HOSTS_PER_NOTIFICATION", "MAX_LOOKUPS_PER_GROUP", "HostKeeper", "identified"]

log = structlog.get_logger(__name__)

LOOKUP_TOOLS = ("find_resource", "find_server")
"""The lookup tools, best first: ``find_resource`` says the kind and the owner of whatever owns an address."""

MAX_HOSTS_PER_NOTIFICATION = 5
"""Hosts looked up after one notification; the others wait for the next one."""

MAX_LOOKUPS_PER_GROUP = 20
"""Host lookups over a group's whole life (a failed one asked again counts again)."""

STALE_ASKING_S = 2 * CALL_TIMEOUT_S + 30.0
"""A host recorded as being looked up for this long was left by a process that stopped: it is asked again."""

_TEAM_TAGS = ("owner", "team")
"""Tags that name a resource's team when the lookup gives no owner."""


@dataclass(frozen=True)
class _Asked:
    """Hosts a lookup was reserved for, and how it is made."""

    card: AlertCard
    target: CardTarget
    tool: str
    hosts: tuple[str, ...]


class HostKeeper:
    """Identifies the hosts each alert card names (see the module docstring)."""

    def __init__(
        self,
        tools: RouteTools,
        *,
        channels: Channels,
        records: CardRecords,
        locale: str,
        redraw: Callable[[str, Destination, AlertCard], Awaitable[None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``redraw(key, dest, card)`` shows the card again once a host was identified."""
        self._tools = tools
        self._channels = channels
        self._records = records
        self._locale = locale
        self._redraw = redraw
        self._clock = clock

    async def identify(self, route: AlertRouteConfig, dest: Destination, key: str) -> None:
        """Look up the hosts of the card under ``key`` not identified yet, record what they are, and show the card
        again when one was identified. Never raises (logged)."""
        try:
            asked = await self._reserve(route, dest, key)
            if asked is None:
                return
            ref = group_ref(asked.card.group.group_key)
            calls = [RouteCall(asked.tool, {"query": host}) for host in asked.hosts]
            outcomes = await self._tools.call(
                route, asked.target, calls, conversation_id=asked.card.conversation_id,
                purpose=f"Which hosts alert card {ref} names: {', '.join(asked.hosts)}",
            )
            now = self._clock()
            found = tuple(identified(host, outcome, now) for host, outcome in zip(asked.hosts, outcomes, strict=True))
            current = await self._settle(key, found)
            log.info("alerts.hosts_looked_up", key=key, tool=asked.tool, asked=len(found),
                     found=sum(h.state == "found" for h in found), failed=sum(h.state == "failed" for h in found))
            if current is not None and any(h.state == "found" for h in found):
                await self._redraw(key, dest, current)
        except Exception as exc:
            log.warning("alerts.hosts_lookup_failed", key=key, error=type(exc).__name__, exc_info=True)

    async def _reserve(self, route: AlertRouteConfig, dest: Destination, key: str) -> _Asked | None:
        """Record the hosts about to be looked up (as ``asking``, counted against the group's lookups); None when
        there is nothing to look up, or no lookup tool the route's role may use there."""
        card = await self._records.load(key)
        if card is None or not _to_ask(card, self._clock()) or not self._channels.available(dest.platform):
            return None  # most notifications (repeats) end here, without taking the record's lock
        target = self._channels.target(dest.platform, dest.chat_id, locale=self._locale)
        usable = self._tools.usable(route, target)
        tool = next((name for name in LOOKUP_TOOLS if name in usable), None)
        if tool is None:
            log.debug("alerts.hosts_no_lookup_tool", route=route.name, role=route.role, wanted=list(LOOKUP_TOOLS))
            return None
        async with self._records.hold(key):
            card = await self._records.load(key)
            if card is None:
                return None
            now = self._clock()
            room = min(MAX_HOSTS_PER_NOTIFICATION, MAX_LOOKUPS_PER_GROUP - card.host_lookups)
            hosts = tuple(_to_ask(card, now)[: max(room, 0)])
            if not hosts:
                return None
            asking = tuple(KnownHost(host=host, state="asking", at=now) for host in hosts)
            card = dataclasses.replace(card, hosts=_merged(card.hosts, asking),
                                       host_lookups=card.host_lookups + len(hosts))
            await self._records.save(key, card)
        return _Asked(card=card, target=target, tool=tool, hosts=hosts)

    async def _settle(self, key: str, found: Sequence[KnownHost]) -> AlertCard | None:
        """Record what the lookup found; the record as it is now (None when it is gone)."""
        async with self._records.hold(key):
            card = await self._records.load(key)
            if card is None:
                return None
            card = dataclasses.replace(card, hosts=_merged(card.hosts, tuple(found)))
            await self._records.save(key, card)
            return card


def _to_ask(card: AlertCard, now: float) -> list[str]:
    """The hosts of the group's alerts that are neither identified, nor known to match nothing, nor being looked up
    now: those never asked first (firing alerts' first), then those whose lookup failed."""
    known = {h.host: h for h in card.hosts}
    alerts = sorted(card.group.alerts, key=lambda a: a.status != "firing")
    fresh: list[str] = []
    again: list[str] = []
    for host in dict.fromkeys(host_of_alert(a) for a in alerts):
        entry = known.get(host)
        if not host or (entry is not None and _settled(entry, now)):
            continue
        (fresh if entry is None else again).append(host)
    return fresh + again


def _settled(entry: KnownHost, now: float) -> bool:
    """Whether ``entry`` needs no lookup now: identified, matching nothing, or being looked up (not for too long)."""
    return entry.state in ("found", "unknown") or (entry.state == "asking" and now - entry.at < STALE_ASKING_S)


def _merged(hosts: tuple[KnownHost, ...], updates: tuple[KnownHost, ...]) -> tuple[KnownHost, ...]:
    """``hosts`` with ``updates`` in place of the entries of the same hosts (new hosts at the end)."""
    merged = {h.host: h for h in hosts}
    for update in updates:
        merged[update.host] = update
    return tuple(merged.values())


def identified(host: str, outcome: ToolOutcome, now: float) -> KnownHost:
    """What ``outcome`` of a lookup of ``host`` says it is: ``found`` (its best match), ``unknown`` (no match), or
    ``failed``."""
    if not outcome.ok:
        return KnownHost(host=host, state="failed", at=now)
    data: Any = outcome.data
    if not isinstance(data, Mapping):
        return KnownHost(host=host, state="unknown", at=now)
    if data.get("kind") == "resource_search":
        matches, kind_of = data.get("resources"), None
    elif data.get("kind") == "server_search":
        matches, kind_of = data.get("servers"), "server"
    else:
        matches, kind_of = None, None
    best = matches[0] if isinstance(matches, list) and matches and isinstance(matches[0], Mapping) else None
    if best is None:
        return KnownHost(host=host, state="unknown", at=now)
    name = _text(best.get("name")) or _text(best.get("id")) or _text(best.get("instance_id"))
    if not name:
        return KnownHost(host=host, state="unknown", at=now)
    raw_tags = best.get("tags")
    tags: Mapping[str, Any] = raw_tags if isinstance(raw_tags, Mapping) else {}
    team = _text(best.get("owner")) or next((_text(tags.get(t)) for t in _TEAM_TAGS if _text(tags.get(t))), "")
    return KnownHost(host=host, state="found", at=now, name=name, kind=kind_of or _text(best.get("kind")),
                     provider=_text(best.get("provider")), team=team)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""
