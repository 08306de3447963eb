"""The slots of a cron expression in a time zone: weekdays in Shanghai, and New York across its DST changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from botgateway.schedules.slots import next_slot, previous_slot, slot_key, zone

WEEKDAYS_9 = "0 9 * * 1-5"
SHANGHAI = "Asia/Shanghai"
NEW_YORK = "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_weekdays_at_nine_in_shanghai_skip_the_weekend() -> None:
    friday_noon = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)  # 20:00 in Shanghai, after Friday's report
    monday = next_slot(WEEKDAYS_9, SHANGHAI, friday_noon)
    assert monday == utc(2026, 11, 30, 1, 0)  # 09:00 +08:00 is 01:00 UTC
    local = monday.astimezone(zone(SHANGHAI))
    assert (local.weekday(), local.hour) == (0, 9)
    assert next_slot(WEEKDAYS_9, SHANGHAI, monday) == utc(2026, 12, 1, 1, 0)


def test_previous_slot_includes_the_moment_itself_and_next_slot_excludes_it() -> None:
    monday = utc(2026, 11, 30, 1, 0)
    assert previous_slot(WEEKDAYS_9, SHANGHAI, monday) == monday
    assert previous_slot(WEEKDAYS_9, SHANGHAI, utc(2026, 11, 30, 0, 59, 59)) == utc(2026, 11, 27, 1, 0)
    assert previous_slot(WEEKDAYS_9, SHANGHAI, utc(2026, 11, 30, 5, 0)) == monday
    assert next_slot(WEEKDAYS_9, SHANGHAI, monday) > monday


def test_nine_o_clock_in_new_york_follows_the_clock_change() -> None:
    # DST starts on Sunday 2026-03-08: 09:00 is 14:00 UTC before and 13:00 UTC after.
    friday = next_slot(WEEKDAYS_9, NEW_YORK, utc(2026, 3, 6, 0, 0))
    monday = next_slot(WEEKDAYS_9, NEW_YORK, friday)
    assert (friday, monday) == (utc(2026, 3, 6, 14, 0), utc(2026, 3, 9, 13, 0))
    assert monday.astimezone(zone(NEW_YORK)).hour == 9
    assert previous_slot(WEEKDAYS_9, NEW_YORK, utc(2026, 3, 9, 12, 59)) == friday
    # DST ends on Sunday 2026-11-01: back to 14:00 UTC.
    assert next_slot(WEEKDAYS_9, NEW_YORK, utc(2026, 10, 30, 14, 0)) == utc(2026, 11, 2, 14, 0)


def test_a_time_skipped_at_spring_forward_runs_once_right_after_the_gap() -> None:
    slots = [next_slot("30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12, 0))]
    slots.append(next_slot("30 2 * * *", NEW_YORK, slots[-1]))
    assert slots == [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]  # 03:00 EDT, then 02:30 EDT


def test_a_time_repeated_at_fall_back_runs_once_but_an_hourly_schedule_keeps_every_hour() -> None:
    first = next_slot("30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12, 0))
    assert first == utc(2026, 11, 1, 5, 30)  # 01:30 EDT
    assert next_slot("30 1 * * *", NEW_YORK, first) == utc(2026, 11, 2, 6, 30)  # not 01:30 EST an hour later
    assert previous_slot("30 1 * * *", NEW_YORK, utc(2026, 11, 1, 7, 0)) == first
    hourly = [next_slot("0 * * * *", NEW_YORK, utc(2026, 11, 1, 4, 30))]
    for _ in range(2):
        hourly.append(next_slot("0 * * * *", NEW_YORK, hourly[-1]))
    assert hourly == [utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 7, 0)]


def test_slot_key_names_the_schedule_and_the_slot_in_utc() -> None:
    slot = next_slot(WEEKDAYS_9, SHANGHAI, utc(2026, 11, 29, 0, 0))
    assert slot_key("stopped-prod", slot) == "schedule:stopped-prod:2026-11-30T01:00:00Z"


@pytest.mark.parametrize(
    ("cron", "tz", "message"),
    [("every day", "UTC", "invalid cron expression 'every day'"), ("0 9 * * *", "Mars/Olympus", "unknown time zone")],
)
def test_bad_expression_or_zone_is_a_value_error_naming_it(cron: str, tz: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        next_slot(cron, tz, utc(2026, 1, 1, 0, 0))


def test_a_naive_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        previous_slot(WEEKDAYS_9, SHANGHAI, datetime(2026, 1, 1, 9, 0))
