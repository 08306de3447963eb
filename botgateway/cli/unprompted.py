"""The parts that post cards nobody asked for, started once the adapters are up: the alert desk and the schedules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from botgateway.sink import Adapter, ChannelCards

if TYPE_CHECKING:
    from datetime import datetime

    from botgateway.cli.runtime import Runtime
    from botgateway.config import ScheduleConfig
    from botgateway.schedules.report import CardResult
    from botgateway.unprompted import Channels

__all__ = ["channels_of", "close_alert_desk", "start_unprompted", "stop_schedules"]

log = structlog.get_logger(__name__)


def channels_of(runtime: Runtime, adapters: Sequence[Adapter]) -> Channels:
    """The running adapters that can post a card into a channel, with their sinks and buffer policies."""
    from botgateway.cards.buffer_policy import BufferPolicy
    from botgateway.unprompted import Channels

    posting = {a.name: a for a in adapters if a.name != "terminal" and isinstance(a, ChannelCards)}
    sinks = {name: a.sink for name, a in posting.items() if getattr(a, "sink", None) is not None}  # type: ignore[attr-defined]
    policies = {name: BufferPolicy.from_config(getattr(runtime.config.adapters, name).policy) for name in posting}
    return Channels(runtime.gateway, posting, sinks, policies)


async def start_unprompted(runtime: Runtime, adapters: Sequence[Adapter]) -> None:
    """Start the alert desk (when routes are configured) and the schedules (when any), over the running adapters."""
    config = runtime.config
    if not config.alerts.enabled and not config.schedules:
        return
    channels = channels_of(runtime, adapters)
    if config.alerts.enabled:
        from botgateway.alerts.desk import AlertDesk

        runtime.late.alert_desk = AlertDesk(
            config=config.alerts, store=runtime.store, budget=runtime.budget, channels=channels,
            read_only_tools=runtime.tools.read_only_names, instance_id=runtime.gateway.instance_id,
            seed=runtime.memory.commit, grapher=runtime.toolset.alert_grapher(),
            tools=runtime.tools, access=config.access,
        )
        log.info("alerts.receiving", routes=[r.name for r in config.alerts.routes])
    if config.schedules:
        from botgateway.schedules.report import post_report, report_cards
        from botgateway.schedules.runner import ScheduleRunner, SystemClock
        from botgateway.schedules.taker import RunNowTaker

        async def run_report(schedule: ScheduleConfig, slot: datetime) -> None:
            await post_report(channels, schedule, slot, tools=runtime.tools.read_only_names())

        async def run_now(schedule: ScheduleConfig, slot: datetime) -> list[CardResult]:
            return await report_cards(channels, schedule, slot, tools=runtime.tools.read_only_names(), by_hand=True)

        # What `botgateway schedules run NAME` hands over runs here, on these adapters (not on a second connection).
        taker = RunNowTaker(config.schedules, store=runtime.store, instance_id=runtime.gateway.instance_id, run=run_now)
        runner = ScheduleRunner(config.schedules, store=runtime.store, run_report=run_report, clock=SystemClock(),
                                taker=taker)
        await runner.start()
        runtime.late.schedules = runner
        log.info("schedules.running", names=[s.name for s in config.schedules])


async def stop_schedules(runtime: Runtime) -> None:
    """No report starts from now on (before the gateway stops its turns)."""
    runner, runtime.late.schedules = runtime.late.schedules, None
    if runner is not None:
        await runner.aclose()


async def close_alert_desk(runtime: Runtime) -> None:
    """After the gateway stopped its turns: the investigations record how their cards ended, the deliveries in
    progress get a moment (the adapters still run), then the desk stops."""
    desk, runtime.late.alert_desk = runtime.late.alert_desk, None
    if desk is not None:
        await desk.aclose()
