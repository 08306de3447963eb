"""The graph on an alert card: the firing expression over the last hour, drawn once firing and again once resolved.

Alertmanager names where an alert came from (``generatorURL``, Prometheus's
graph page of the rule's expression). An :class:`AlertGrapher` (the composition
root gives one when Prometheus is configured) draws that expression, with the
rule's threshold, into a picture; :class:`GraphKeeper` delivers it for the
group's card through the platform's sink (an upload into the card's thread, a
``media_id`` in the card) and records what the card shows for it, so every
later redraw (an edit, the investigation's updates) carries it. A group gets
one graph for its state: drawn when it fires, redrawn when it resolves.
A graph that cannot be drawn leaves the card as it is; one that cannot be
delivered leaves a one-line note on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

import structlog

from botgateway.alerts.group import AlertGroup
from botgateway.alerts.records import AlertCard, CardRecords, GraphShown
from botgateway.artifacts import Artifact
from botgateway.destinations import Destination
from botgateway.sink import ArtifactSink, SinkError
from botgateway.strings import t
from botgateway.tooling.contract import one_line
from botgateway.unprompted import Channels

__all__ = ["AlertGrapher", "DrawnGraph", "GraphKeeper", "grafana_link"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class DrawnGraph:
    """An alert's graph, and the expression it shows."""

    artifact: Artifact
    """The picture."""
    expr: str
    """The PromQL it graphs (for a Grafana link of the same)."""


class AlertGrapher(Protocol):
    """Draws what an alert fired on."""

    async def graph(self, group: AlertGroup, *, locale: str) -> DrawnGraph | None:
        """The graph of ``group``'s firing expression over the last hour (its threshold drawn when the rule has one);
        None when its alerts name no expression this grapher can read. Never raises for bad input."""
        ...


class GraphKeeper:
    """Draws and delivers each alert card's graph, once per state of its group."""

    def __init__(
        self,
        grapher: AlertGrapher,
        *,
        channels: Channels,
        records: CardRecords,
        locale: str,
        redraw: Callable[[str, Destination, AlertCard], Awaitable[None]],
        grafana_url: str = "",
    ) -> None:
        """``redraw(key, dest, card)`` shows the card again once its graph must appear in its body (or its note);
        ``grafana_url``: a Grafana page linked beside the graph (``{expr}`` in it becomes the expression)."""
        self._grafana_url = grafana_url
        self._grapher = grapher
        self._channels = channels
        self._records = records
        self._locale = locale
        self._redraw = redraw
        self._drawing: set[str] = set()

    async def refresh(self, key: str, dest: Destination) -> None:
        """Draw and deliver the graph of the card under ``key`` if its group's state has none yet. Never raises."""
        if key in self._drawing:
            return  # the one drawing now reads the record again when it is done
        self._drawing.add(key)
        try:
            while await self._refresh_once(key, dest):
                pass  # the group changed state while its graph was drawn: draw it for the new state
        except Exception as exc:
            log.warning("alerts.graph_failed", key=key, error=type(exc).__name__, exc_info=True)
        finally:
            self._drawing.discard(key)

    async def _refresh_once(self, key: str, dest: Destination) -> bool:
        card = await self._records.load(key)
        if card is None or card.handle is None or not self._channels.available(dest.platform):
            return False
        status = card.group.status
        if card.graph is not None and card.graph.status == status:
            return False
        drawn = await self._grapher.graph(card.group, locale=self._locale)
        if drawn is None:
            return False
        shown = await self._deliver(dest, card, drawn.artifact, status)
        shown = dataclasses.replace(shown, link=grafana_link(self._grafana_url, drawn.expr))
        async with self._records.hold(key):
            current = await self._records.load(key)
            if current is None:
                return False
            current = dataclasses.replace(current, graph=shown)
            await self._records.save(key, current)
        if shown.embed or shown.error:
            await self._redraw(key, dest, current)
        log.info("alerts.graph_shown", key=key, status=status, embedded=bool(shown.embed), failed=bool(shown.error))
        return current.group.status != status

    async def _deliver(self, dest: Destination, card: AlertCard, artifact: Artifact, status: str) -> GraphShown:
        sink = self._channels.sink(dest.platform)
        assert card.handle is not None
        if not isinstance(sink, ArtifactSink):
            return GraphShown(status=status, title=artifact.title)
        try:
            placement = await sink.ship_artifact(card.handle.target, artifact, card.handle)
        except SinkError as exc:
            reason = one_line(str(exc), 160) or t(self._locale, "chart_internal")
            return GraphShown(status=status, title=artifact.title, error=reason)
        return GraphShown(status=status, title=artifact.title, embed=placement.embed)


def grafana_link(template: str, expr: str) -> str:
    """``template`` with ``{expr}`` replaced by ``expr`` URL-encoded (a template without it is linked as it is)."""
    return template.replace("{expr}", quote(expr, safe="")) if template else ""
