"""A scheduled report: its prompt asked as ``schedule:<name>`` with its role, one headed card per destination."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from botgateway.config import ScheduleConfig
from botgateway.destinations import parse_destination
from botgateway.messages import Submission
from botgateway.schedules.heading import report_heading, with_heading
from botgateway.unprompted import Channels, UnpromptedTurn, gateway_principal

__all__ = ["CardResult", "ReportStart", "card_results", "post_report", "report_cards", "start_report"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReportStart:
    """What became of one destination of a report when it was asked: a turn started, or why none did."""

    destination: str
    """The destination as configured (``slack:C0OPS``)."""
    submission: Submission | None = None
    """The turn's submission (its ``done`` resolves once the card is final); None when no turn started."""
    outcome: str = ""
    """When no turn started: ``skipped`` (its adapter is not running here) or ``refused`` (by the gateway)."""
    reason: str = ""
    """Why no card was started (the adapter is not running here, the policy refused the turn)."""


@dataclass(frozen=True)
class CardResult:
    """How one destination's card of a report ended."""

    destination: str
    """The destination as configured (``slack:C0OPS``)."""
    outcome: str
    """``done``, ``failed:<reason>``, ``stopped``, ``moved``, ``refused``, or ``skipped`` (no card was started)."""
    turn_id: str = ""
    """The turn that drew the card; empty when none started."""
    reason: str = ""
    """Why there is no card, in plain words (skipped, refused)."""

    @property
    def delivered(self) -> bool:
        """True when the card ended with an answer."""
        return self.outcome == "done"


async def start_report(
    channels: Channels, schedule: ScheduleConfig, slot: datetime, *, tools: frozenset[str] | None,
    by_hand: bool = False,
) -> list[ReportStart]:
    """Ask ``schedule``'s prompt for ``slot`` in each of its destinations; what became of each, in config order.

    ``tools``: the tools a report may be offered (the read-only ones: nobody watches a report run, so it never
    changes anything); the schedule's role narrows them further. Each run is a conversation of its own
    (``schedule:<name>:<slot>:<destination>``): a report does not carry the last one's answers into the next.
    Each card is headed with the schedule's name, the slot in its time zone and the prompt (``by_hand``: run with
    ``schedules run``, which the heading says). A destination whose adapter is not running here is logged and
    skipped.
    """
    heading = report_heading(schedule, slot, by_hand=by_hand)
    started: list[ReportStart] = []
    for text in schedule.to:
        dest = parse_destination(text)
        if not channels.available(dest.platform):
            reason = f"the {dest.platform} adapter is not running"
            log.warning("schedules.destination_unavailable", name=schedule.name, destination=text, reason=reason)
            started.append(ReportStart(text, outcome="skipped", reason=reason))
            continue
        sink, target = with_heading(channels.sink(dest.platform),
                                    channels.target(dest.platform, dest.chat_id, locale=schedule.locale), heading)
        turn = UnpromptedTurn(
            principal=gateway_principal("schedule", schedule.name), role=schedule.role, question=schedule.prompt,
            conversation_id=f"schedule:{schedule.name}:{slot.isoformat()}:{text}", target=target, tools=tools,
        )
        submission = await channels.ask(turn, sink=sink)
        if submission.status == "refused":
            log.warning("schedules.report_refused", name=schedule.name, destination=text, reason=submission.message[:200])
            started.append(ReportStart(text, outcome="refused", reason=submission.message))
            continue
        log.info("schedules.report_started", name=schedule.name, destination=text, turn_id=submission.turn_id,
                 slot=slot.isoformat())
        started.append(ReportStart(text, submission=submission))
    return started


async def post_report(
    channels: Channels, schedule: ScheduleConfig, slot: datetime, *, tools: frozenset[str] | None
) -> list[Submission]:
    """:func:`start_report` at ``slot``; the submissions of the turns started (the cards stream on)."""
    starts = await start_report(channels, schedule, slot, tools=tools)
    return [start.submission for start in starts if start.submission is not None]


async def card_results(starts: Sequence[ReportStart]) -> list[CardResult]:
    """Wait for every card of ``starts`` to be final; how each destination's ended, in the same order."""
    futures = [start.submission.done for start in starts if start.submission is not None and start.submission.done]
    outcomes = iter(await asyncio.gather(*futures))
    results: list[CardResult] = []
    for start in starts:
        if start.submission is None:
            results.append(CardResult(start.destination, start.outcome, reason=start.reason))
        elif start.submission.done is None:  # a duplicate: another turn already answers it
            results.append(CardResult(start.destination, start.submission.status, start.submission.turn_id))
        else:
            ended = next(outcomes)
            results.append(CardResult(start.destination, ended.outcome, ended.turn_id))
    return results


async def report_cards(
    channels: Channels, schedule: ScheduleConfig, slot: datetime, *, tools: frozenset[str] | None,
    by_hand: bool = False,
) -> list[CardResult]:
    """:func:`start_report`, then wait for its cards to be final: how each destination's card ended."""
    return await card_results(await start_report(channels, schedule, slot, tools=tools, by_hand=by_hand))
