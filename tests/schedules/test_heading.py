"""A report card's heading: the schedule's name, its slot in the schedule's own zone, what it asks; on every update."""

from __future__ import annotations

from datetime import UTC, datetime

from botgateway.config.schedules import ScheduleConfig
from botgateway.schedules.heading import MAX_PROMPT_CHARS, report_heading, with_heading
from botgateway.sink import CardOp, CardTarget, Replanning
from botgateway.snapshot import CardSnapshot
from tests.fakes.gateway import RecordingSink


def schedule(**changes: object) -> ScheduleConfig:
    fields: dict[str, object] = {
        "name": "nightly-ny", "cron": "30 1 * * *", "timezone": "America/New_York", "to": ["slack:C0OPS"],
        "prompt": "Summarize the day's alerts", "role": "oncall",
    }
    return ScheduleConfig.model_validate({**fields, **changes})


def test_the_heading_names_the_schedule_its_slot_in_its_zone_and_its_prompt() -> None:
    # 05:30 UTC on 1 November 2026 is 01:30 in New York, the first time that night (daylight time).
    slot = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert report_heading(schedule(), slot) == (
        "🗓 **Scheduled report: nightly-ny** · 2026-11-01 01:30 America/New_York\n> Summarize the day's alerts"
    )
    assert report_heading(schedule(), slot, by_hand=True) == (
        "🗓 **Scheduled report: nightly-ny** · 2026-11-01 01:30 America/New_York (run by hand)\n"
        "> Summarize the day's alerts"
    )


def test_the_heading_speaks_the_schedules_locale_and_quotes_a_long_prompt_on_one_line() -> None:
    prompt = "List the stopped servers\nin prod,   grouped by account. " + "x" * 400
    heading = report_heading(schedule(locale="zh-CN", timezone="Asia/Shanghai", prompt=prompt),
                             datetime(2026, 11, 30, 1, 0, tzinfo=UTC), by_hand=True)
    first, quote = heading.split("\n")
    assert first == "🗓 **定时报告：nightly-ny** · 2026-11-30 09:00 Asia/Shanghai （手动运行）"
    assert quote.startswith("> List the stopped servers in prod, grouped by account. xxx") and quote.endswith("…")
    assert len(quote) == len("> ") + MAX_PROMPT_CHARS


class ReplanningSink(RecordingSink):
    """A sink with another way to make a call (as Slack's stream or edit)."""

    def __init__(self) -> None:
        super().__init__("slack")
        self.replanned: list[CardOp] = []

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        self.replanned.append(op)
        return True


async def test_every_snapshot_of_the_first_part_is_headed_and_recovery_keeps_the_heading() -> None:
    inner = RecordingSink("slack")
    sink, target = with_heading(inner, CardTarget(platform="slack", chat_id="C0OPS", extra={"k": "v"}), "HEADING")
    assert target.extra == {"k": "v", "preamble": "HEADING"}  # what recovery shows above "interrupted"
    assert not isinstance(sink, Replanning)  # the inner sink has one way only: the card waits for it

    handle = await sink.create(target, CardSnapshot(status="queued"))
    await sink.update(handle, CardSnapshot(status="working", answer="2 servers"))
    await sink.finalize(handle, CardSnapshot(status="done", answer="2 servers are stopped", continued=True))
    await sink.create(target, CardSnapshot(status="done", answer="…and more", part=2))

    assert [(c.op, c.snapshot.preamble) for c in inner.calls] == [
        ("create", "HEADING"), ("update", "HEADING"), ("finalize", "HEADING"), ("create", "")
    ]


async def test_a_sink_that_can_replan_still_can_under_its_heading() -> None:
    inner = ReplanningSink()
    sink, target = with_heading(inner, CardTarget(platform="slack", chat_id="C0OPS"), "HEADING")
    assert isinstance(sink, Replanning)
    assert sink.replan("create", target) is True and inner.replanned == ["create"]
