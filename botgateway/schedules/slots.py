"""When a schedule fires: the slots of a cron expression in a time zone, read by ``croniter``.

A *slot* is one moment a schedule is due, as an aware datetime in UTC (to be
shown in the schedule's zone: ``slot.astimezone(zone(tz))``). UTC because
Python compares two datetimes of one zone by their wall-clock time: 01:30
before and after a fall-back would be equal. Cron fields are wall-clock times,
so the iteration starts from a moment in the schedule's zone and
daylight-saving changes behave as cron does:

- a time that does not exist (02:30 on the spring-forward night) fires once,
  at the first moment after the gap (03:00);
- a time that happens twice (01:30 on the fall-back night) fires once, at its
  first occurrence, when the expression names its hours; an expression that
  runs every hour (``*`` in the hour field) keeps both, as every hour passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

__all__ = ["ScheduleTimes", "next_runs", "next_slot", "previous_slot", "slot_key", "zone"]


class ScheduleTimes(Protocol):
    """What the slots of a schedule depend on (a :class:`~botgateway.config.schedules.ScheduleConfig`)."""

    @property
    def name(self) -> str:
        """The schedule's unique name."""
        ...

    @property
    def cron(self) -> str:
        """Five-field cron expression."""
        ...

    @property
    def timezone(self) -> str:
        """IANA zone the cron fields are read in."""
        ...


_S = TypeVar("_S", bound=ScheduleTimes)


def zone(tz: str) -> ZoneInfo:
    """The IANA zone ``tz``; ``ValueError`` naming it when it is unknown."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r} (an IANA name such as Asia/Shanghai or UTC)") from None


def _slots(cron: str, tz: str, start: datetime, *, forward: bool) -> Iterator[datetime]:
    """The slots after (``forward``) or before ``start``, strictly, skipping a repeated hour's second pass."""
    if start.tzinfo is None:
        raise ValueError("a slot is computed from an aware datetime (with its time zone)")
    place = zone(tz)
    try:
        it = croniter(cron, start.astimezone(place))
    except (ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {cron!r}: {exc}") from None
    fixed_hours = it.expanded[1] != ["*"]
    while True:
        found = it.get_next(datetime) if forward else it.get_prev(datetime)
        # In UTC, then back in the zone for the check: croniter's fold flag is not always the one of its instant.
        slot = found.astimezone(UTC)
        if fixed_hours and _second_pass(slot.astimezone(place)):
            continue
        yield slot


def _second_pass(slot: datetime) -> bool:
    """True when ``slot``'s wall-clock time happened earlier that night already (the hour repeated at fall-back)."""
    return slot.fold == 1 and slot.replace(fold=0).utcoffset() != slot.utcoffset()


def next_slot(cron: str, tz: str, after: datetime) -> datetime:
    """The first slot of ``cron`` in zone ``tz`` strictly after ``after`` (aware), in UTC.

    Raises ``ValueError`` for an invalid expression, an unknown zone or a naive ``after``.
    """
    return next(_slots(cron, tz, after, forward=True))


def previous_slot(cron: str, tz: str, at: datetime) -> datetime:
    """The most recent slot of ``cron`` in zone ``tz`` at or before ``at`` (aware), in UTC.

    Raises ``ValueError`` for an invalid expression, an unknown zone or a naive ``at``.
    """
    # croniter's step back is strict; a slot exactly at ``at`` is the next one after an instant before it.
    exact = next_slot(cron, tz, at - timedelta(microseconds=1))
    if exact <= at:
        return exact
    return next(_slots(cron, tz, at, forward=False))


def slot_key(name: str, slot: datetime) -> str:
    """The Store key claimed to run schedule ``name``'s ``slot``: ``schedule:<name>:<slot in UTC, ISO 8601>``."""
    return f"schedule:{name}:{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def next_runs(schedules: Iterable[_S], now: datetime) -> list[tuple[_S, datetime]]:
    """Each schedule with its next slot after ``now`` (in UTC), in the order given."""
    return [(schedule, next_slot(schedule.cron, schedule.timezone, now)) for schedule in schedules]
