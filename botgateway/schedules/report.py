"""A scheduled report: its prompt asked as ``schedule:<name>`` with its role, one card per destination."""

from __future__ import annotations

from datetime import datetime

import structlog

from botgateway.config import ScheduleConfig
from botgateway.destinations import parse_destination
from botgateway.messages import Submission
from botgateway.unprompted import Channels, UnpromptedTurn, gateway_principal

__all__ = ["post_report"]

log = structlog.get_logger(__name__)


async def post_report(
    channels: Channels, schedule: ScheduleConfig, slot: datetime, *, tools: frozenset[str] | None
) -> list[Submission]:
    """Ask ``schedule``'s prompt for ``slot`` in each of its destinations; the submissions of the turns started.

    ``tools``: the tools a report may be offered (the read-only ones: nobody watches a report run, so it never
    changes anything); the schedule's role narrows them further. Each run is a conversation of its own
    (``schedule:<name>:<slot>:<destination>``): a report does not carry the last one's answers into the next. A
    destination whose adapter is not running here is logged and skipped.
    """
    started: list[Submission] = []
    for text in schedule.to:
        dest = parse_destination(text)
        if not channels.available(dest.platform):
            log.warning("schedules.destination_unavailable", name=schedule.name, destination=text,
                        reason=f"the {dest.platform} adapter is not running in this process")
            continue
        turn = UnpromptedTurn(
            principal=gateway_principal("schedule", schedule.name), role=schedule.role, question=schedule.prompt,
            conversation_id=f"schedule:{schedule.name}:{slot.isoformat()}:{text}",
            target=channels.target(dest.platform, dest.chat_id, locale=schedule.locale), tools=tools,
        )
        submission = await channels.ask(turn)
        if submission.status == "refused":
            log.warning("schedules.report_refused", name=schedule.name, destination=text, reason=submission.message[:200])
            continue
        log.info("schedules.report_started", name=schedule.name, destination=text, turn_id=submission.turn_id,
                 slot=slot.isoformat())
        started.append(submission)
    return started
