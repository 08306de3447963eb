"""What the Store keeps of one alert group's card in one destination, between notifications and across replicas."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from botgateway.alerts.group import AlertGroup, group_from_dict, group_to_dict
from botgateway.alerts.known_hosts import KnownHost, hosts_from_list, hosts_to_list
from botgateway.alerts.lock import GroupLocks
from botgateway.artifacts import Artifact, ArtifactView
from botgateway.sink import CardHandle, target_from_dict, target_to_dict
from botgateway.snapshot import Block, Narration, ToolLine
from botgateway.stores.base import DocumentStore

__all__ = [
    "AlertCard", "CardRecords", "GraphShown", "Investigation", "InvestigationStatus", "card_from_dict", "card_key", "card_to_dict",
]

InvestigationStatus: TypeAlias = Literal["running", "done", "failed", "stopped", "refused", "interrupted"]
"""Where an alert's investigation is: running, or how it ended (refused: the policy or a limit said no)."""


def card_key(destination: str, group_key: str) -> str:
    """The record's Store key: one per destination and alert group, whichever route brought it there (a group's
    common labels, and so its route, may change as alerts join it). Alertmanager's group keys are long: hashed."""
    digest = hashlib.sha256(group_key.encode()).hexdigest()[:32]
    return f"alertcard:{destination}:{digest}"


@dataclass(frozen=True, kw_only=True)
class Investigation:
    """The read-only turn that investigates a new alert group, as its card shows it."""

    status: InvestigationStatus
    """Running, or how it ended."""
    started_at: float
    """Unix time it was started."""
    owner: str
    """Instance id of the process running it."""
    turn_id: str = ""
    """Its turn, once scheduled."""
    blocks: tuple[Block, ...] = ()
    """Its tool lines and narration, once ended."""
    answer: str = ""
    """Its answer, once ended."""
    error: str = ""
    """Why it ended without an answer (failed, stopped, refused, interrupted)."""
    footer: str = ""
    """Its final card's footer (round, time, model; the sources line), once ended: a redraw shows it again."""


@dataclass(frozen=True, kw_only=True)
class AlertCard:
    """One alert group's card in one destination."""

    route: str
    """The route's name (its principal is ``alerts:<route>``)."""
    destination: str
    """``slack:C0OPS`` or ``dingtalk:cid…``."""
    group: AlertGroup
    """The group as the notifications so far left it."""
    handle: CardHandle | None = None
    """The posted card; None until it was posted (a failed post is tried again at the next notification)."""
    conversation_id: str = ""
    """The conversation a reply to the card continues (the investigation's too)."""
    investigation: Investigation | None = None
    """The group's investigation, when its route investigates."""
    graph: GraphShown | None = None
    """The graph of what fired, as delivered last; None until one was drawn."""
    hosts: tuple[KnownHost, ...] = ()
    """The hosts its alerts name that were looked up (found or not), in the order they were first asked."""
    host_lookups: int = 0
    """Host lookups made for the group so far (bounded per group; a failed one asked again counts again)."""


@dataclass(frozen=True, kw_only=True)
class GraphShown:
    """The graph an alert card got: for which state of the group, and what the card shows for it."""

    status: str
    """The group's status it was drawn for (``firing``, then ``resolved`` when it is drawn again)."""
    title: str
    """What it shows."""
    embed: str = ""
    """Markup the card shows in its body (a DingTalk ``media_id`` image); empty when it lives beside the card."""
    error: str = ""
    """Why it could not be delivered, when it could not."""
    link: str = ""
    """A Grafana page of the same expression, linked beside the graph; empty when none is configured."""

    def view(self) -> ArtifactView:
        """How the card shows it (the pixels are not kept: the platform has them)."""
        artifact = Artifact(ref="", title=self.title, png=b"", width=0, height=0)
        if self.error:
            return ArtifactView(artifact=artifact, state="failed", error=self.error)
        return ArtifactView(artifact=artifact, state="shown", embed=self.embed)


def _block_to_dict(block: Block) -> dict[str, Any]:
    if isinstance(block, Narration):
        return {"kind": "narration", "round": block.round, "text": block.text}
    return {"kind": "tool", "call_id": block.call_id, "name": block.name, "args_preview": block.args_preview,
            "status": block.status, "duration_s": block.duration_s, "summary": block.summary,
            "approval": block.approval, "freshness": block.freshness}


def _block_from_dict(data: Mapping[str, Any]) -> Block | None:
    if data.get("kind") == "narration":
        return Narration(round=int(data.get("round") or 0), text=str(data.get("text") or ""))
    if data.get("kind") != "tool":
        return None
    status = data.get("status")
    duration = data.get("duration_s")
    return ToolLine(
        call_id=str(data.get("call_id") or ""), name=str(data.get("name") or ""),
        args_preview=str(data.get("args_preview") or ""),
        status=status if status in ("running", "waiting", "done", "failed") else "failed",
        duration_s=float(duration) if isinstance(duration, (int, float)) else None,
        summary=str(data.get("summary") or ""), approval=str(data.get("approval") or ""),
        freshness=str(data.get("freshness") or ""),
    )


def card_to_dict(card: AlertCard) -> dict[str, Any]:
    """A JSON-ready copy of ``card`` for :meth:`~botgateway.stores.base.DocumentStore.put_document`."""
    handle = card.handle
    inv = card.investigation
    return {
        "route": card.route,
        "destination": card.destination,
        "group": group_to_dict(card.group),
        "handle": None if handle is None else {
            "card_id": handle.card_id, "target": target_to_dict(handle.target), "data": dict(handle.data)},
        "conversation_id": card.conversation_id,
        "investigation": None if inv is None else {
            "status": inv.status, "started_at": inv.started_at, "owner": inv.owner, "turn_id": inv.turn_id,
            "blocks": [_block_to_dict(b) for b in inv.blocks], "answer": inv.answer, "error": inv.error,
            "footer": inv.footer},
        "graph": None if card.graph is None else dataclasses.asdict(card.graph),
        "hosts": hosts_to_list(card.hosts),
        "host_lookups": card.host_lookups,
    }


def card_from_dict(data: Mapping[str, Any]) -> AlertCard:
    """Rebuild a card record (tolerant of fields an older release did not write)."""
    raw_handle = data.get("handle")
    handle = None
    if isinstance(raw_handle, Mapping) and raw_handle.get("card_id"):
        target = raw_handle.get("target")
        handle = CardHandle(card_id=str(raw_handle["card_id"]),
                            target=target_from_dict(target if isinstance(target, Mapping) else {}),
                            data=dict(raw_handle.get("data") or {}))
    raw_inv = data.get("investigation")
    inv = None
    if isinstance(raw_inv, Mapping):
        status = raw_inv.get("status")
        blocks = [_block_from_dict(b) for b in raw_inv.get("blocks") or () if isinstance(b, Mapping)]
        inv = Investigation(
            status=status if status in ("running", "done", "failed", "stopped", "refused", "interrupted") else "interrupted",
            started_at=float(raw_inv.get("started_at") or 0.0), owner=str(raw_inv.get("owner") or ""),
            turn_id=str(raw_inv.get("turn_id") or ""), blocks=tuple(b for b in blocks if b is not None),
            answer=str(raw_inv.get("answer") or ""), error=str(raw_inv.get("error") or ""),
            footer=str(raw_inv.get("footer") or ""),
        )
    return AlertCard(
        route=str(data.get("route") or ""), destination=str(data.get("destination") or ""),
        group=group_from_dict(data.get("group") or {}), handle=handle,
        conversation_id=str(data.get("conversation_id") or ""), investigation=inv, graph=_graph_from(data.get("graph")),
        hosts=hosts_from_list(data.get("hosts")), host_lookups=_count(data.get("host_lookups")),
    )


def _count(raw: Any) -> int:
    return int(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0 else 0


def _graph_from(raw: Any) -> GraphShown | None:
    if not isinstance(raw, Mapping) or not raw.get("status"):
        return None
    return GraphShown(status=str(raw["status"]), title=str(raw.get("title") or ""), embed=str(raw.get("embed") or ""),
                      error=str(raw.get("error") or ""), link=str(raw.get("link") or ""))


class CardRecords:
    """The card records in the Store, each read-modify-write under its record's fleet-wide lock."""

    def __init__(self, store: DocumentStore, locks: GroupLocks, *, keep_s: float) -> None:
        """``keep_s``: a record (and what names its conversation) lives this long after its last write."""
        self.store = store
        """The Store the records live in."""
        self._locks = locks
        self.keep_s = keep_s
        """How long a record is kept after its last write."""

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s lock (read, change and write the record inside)."""
        async with self._locks.hold(key):
            yield

    async def load(self, key: str) -> AlertCard | None:
        """The record under ``key``, if any."""
        data = await self.store.get_document(key)
        return card_from_dict(data) if data else None

    async def save(self, key: str, card: AlertCard) -> None:
        """Write the record (its expiry starts again)."""
        await self.store.put_document(key, card_to_dict(card), self.keep_s)
