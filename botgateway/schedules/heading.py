"""A report card's heading: which schedule it is, for when, and what it asks, shown above the answer.

A report lands in a channel nobody asked in, often beside yesterday's: the
heading says what it is before the answer says anything. It is the card's
preamble (:attr:`~botgateway.snapshot.CardSnapshot.preamble`), so every
platform draws it apart from the answer and makes it inert like model text (the
prompt is configuration, but it is shown, not obeyed). :func:`with_heading`
wraps the platform's sink so that every snapshot of the card's first part
carries it; the target carries it too (``extra["preamble"]``), so a card that
recovery closes after a crash keeps it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.config import ScheduleConfig
from botgateway.schedules.slots import zone
from botgateway.sink import ArtifactSink, CardHandle, CardOp, CardSink, CardTarget, Replanning
from botgateway.snapshot import CardSnapshot
from botgateway.strings import t

__all__ = ["MAX_PROMPT_CHARS", "HeadedSink", "report_heading", "with_heading"]

MAX_PROMPT_CHARS = 300
"""Most of the prompt the heading quotes (on one line): the heading says what is asked, the answer follows."""


def report_heading(schedule: ScheduleConfig, slot: datetime, *, by_hand: bool = False) -> str:
    """The heading of ``schedule``'s report for ``slot`` (aware), in the schedule's locale and time zone.

    ``by_hand``: run with ``botgateway schedules run`` rather than at a slot of its cron; the heading says so.
    """
    local = slot.astimezone(zone(schedule.timezone))
    when = f"{local.strftime('%Y-%m-%d %H:%M')} {schedule.timezone}"
    if by_hand:
        when = f"{when} {t(schedule.locale, 'schedule_by_hand')}"
    prompt = " ".join(schedule.prompt.split())
    if len(prompt) > MAX_PROMPT_CHARS:
        prompt = prompt[: MAX_PROMPT_CHARS - 1].rstrip() + "…"
    return t(schedule.locale, "schedule_heading", name=schedule.name, when=when, prompt=prompt)


class HeadedSink:
    """A :class:`~botgateway.sink.CardSink` showing ``heading`` above every snapshot of a card's first part.

    Everything else is the inner sink's: its budgets, its size, its pictures (an inner sink that does not deliver
    pictures draws them itself, as it would unwrapped).
    """

    def __init__(self, inner: CardSink, heading: str) -> None:
        self.platform = inner.platform
        """The inner sink's platform."""
        self.max_chars = inner.max_chars
        """The inner sink's size (the heading is short; the preamble's own limit bounds it)."""
        self.heading = heading
        """The Markdown shown above the card."""
        self._inner = inner

    def _headed(self, snapshot: CardSnapshot) -> CardSnapshot:
        return dataclasses.replace(snapshot, preamble=self.heading) if snapshot.part == 1 else snapshot

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The inner sink's bucket for ``op``."""
        return self._inner.rate_key(op, target)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """The inner sink's new card, headed."""
        return await self._inner.create(target, self._headed(snapshot))

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """The card shows ``snapshot``, headed."""
        return await self._inner.update(handle, self._headed(snapshot))

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """The card's final ``snapshot``, headed."""
        return await self._inner.finalize(handle, self._headed(snapshot))

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """The inner sink's other way of posting ``snapshot``, headed."""
        await self._inner.fallback(target, self._headed(snapshot))

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """A picture delivered by the inner sink; nothing to place when the inner sink draws pictures itself."""
        if not isinstance(self._inner, ArtifactSink):
            return ArtifactPlacement()
        return await self._inner.ship_artifact(target, artifact, handle)


class _ReplanningHeadedSink(HeadedSink):
    """A :class:`HeadedSink` over a sink with more than one way to make a call (Slack: a stream or an edit)."""

    def __init__(self, inner: Replanning, heading: str) -> None:
        super().__init__(inner, heading)  # type: ignore[arg-type]  # a Replanning here is always a CardSink too
        self._planner = inner

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The inner sink's other plan for ``op``."""
        return self._planner.replan(op, target)


def with_heading(sink: CardSink, target: CardTarget, heading: str) -> tuple[HeadedSink, CardTarget]:
    """``sink`` showing ``heading`` above its cards, and ``target`` carrying it for recovery.

    The wrapper replans as the inner sink does only when the inner sink can: the card streamer's patience for a
    card's creation depends on whether it can.
    """
    headed = _ReplanningHeadedSink(sink, heading) if isinstance(sink, Replanning) else HeadedSink(sink, heading)
    return headed, dataclasses.replace(target, extra={**target.extra, "preamble": heading})
