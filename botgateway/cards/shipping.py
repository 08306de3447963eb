"""Delivering a card's pictures through its sink, beside the card's own calls, never holding up the answer.

A tool's chart arrives with its call's end, usually well before the answer is
written. :class:`PictureShipper` hands each one to an
:class:`~botgateway.sink.ArtifactSink` in its own task, once the card exists (a
Slack upload into the card's thread must come after the card), and folds the
outcome into the card's state. The final answer waits for deliveries still
running only a short while (:data:`SETTLE_S`): what is not delivered by then is
given up and the card says so in one line. A sink that does not deliver
pictures draws them from the snapshot itself (a terminal's sparkline).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.background import BackgroundTasks
from botgateway.cards.state import CardState
from botgateway.sink import ArtifactSink, CardHandle, CardSink, CardTarget, SinkError
from botgateway.strings import t
from botgateway.tooling.contract import one_line

__all__ = ["SETTLE_S", "PictureShipper"]

log = structlog.get_logger(__name__)

SETTLE_S = 5.0
"""How long the final answer waits for pictures still being delivered."""


class PictureShipper:
    """Delivers the pictures of one card, each once."""

    def __init__(
        self,
        sink: CardSink,
        target: CardTarget,
        state: CardState,
        *,
        created: asyncio.Event,
        handle: Callable[[], CardHandle | None],
        on_change: Callable[[], None],
    ) -> None:
        """``created`` is set once the card's creation ended (made or given up); ``handle`` is the card then;
        ``on_change`` is told when the card shows something new (a picture placed or failed)."""
        self._sink = sink if isinstance(sink, ArtifactSink) else None
        self._target = target
        self._state = state
        self._created = created
        self._handle = handle
        self._on_change = on_change
        self._tasks = BackgroundTasks()
        self._started: set[str] = set()

    def ship_new(self) -> None:
        """Start delivering every picture the card holds that is not on its way yet."""
        for artifact in self._state.pictures.pending:
            if artifact.ref in self._started:
                continue
            self._started.add(artifact.ref)
            if self._sink is None:
                self._settle(artifact.ref, ArtifactPlacement())  # drawn by the sink from the snapshot, if at all
                continue
            self._tasks.spawn(self._ship(self._sink, artifact), name=f"card-picture:{artifact.ref}")

    async def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Wait up to ``timeout_s`` for deliveries still running; give up the rest, saying so on the card."""
        self.ship_new()
        if not await self._tasks.wait(timeout_s):
            await self._tasks.aclose()
        for artifact in self._state.pictures.pending:
            self._fail(artifact.ref, t(self._state.locale, "chart_slow"))

    async def aclose(self) -> None:
        """Stop every delivery still running (shutdown)."""
        await self._tasks.aclose()

    async def _ship(self, sink: ArtifactSink, artifact: Artifact) -> None:
        await self._created.wait()
        handle = self._handle()
        try:
            placement = await sink.ship_artifact(self._target, artifact, handle)
        except SinkError as exc:
            log.warning("card.picture_failed", platform=self._target.platform, ref=artifact.ref,
                        error=type(exc).__name__, reason=str(exc))
            self._fail(artifact.ref, one_line(str(exc), 160) or t(self._state.locale, "chart_internal"))
        except Exception:
            log.exception("card.picture_crashed", platform=self._target.platform, ref=artifact.ref)
            self._fail(artifact.ref, t(self._state.locale, "chart_internal"))
        else:
            log.info("card.picture_shipped", platform=self._target.platform, ref=artifact.ref,
                     embedded=bool(placement.embed))
            self._settle(artifact.ref, placement)

    def _settle(self, ref: str, placement: ArtifactPlacement) -> None:
        if self._state.artifact_placed(ref, placement) and placement.embed:
            self._on_change()

    def _fail(self, ref: str, reason: str) -> None:
        if self._state.artifact_failed(ref, reason):
            self._on_change()
