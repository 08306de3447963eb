"""The parts that post cards nobody asked for, started once the adapters are up: the alert desk and the schedules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from botgateway.sink import Adapter, ChannelCards

if TYPE_CHECKING:
    from botgateway.cli.runtime import Runtime
    from botgateway.unprompted import Channels

__all__ = ["channels_of", "start_unprompted", "stop_unprompted"]

log = structlog.get_logger(__name__)


def channels_of(runtime: Runtime, adapters: Sequence[Adapter]) -> Channels:
    """The running adapters that can post a card into a channel, with their sinks and buffer policies."""
    from botgateway.cards.policy import BufferPolicy
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
            seed=runtime.memory.commit,
        )
        log.info("alerts.receiving", routes=[r.name for r in config.alerts.routes])
    if config.schedules:
        from botgateway.reports import post_report
        from botgateway.schedules.runner import ScheduleRunner, SystemClock

        async def run_report(schedule, slot):  # type: ignore[no-untyped-def]
            await post_report(channels, schedule, slot)

        runner = ScheduleRunner(config.schedules, store=runtime.store, run_report=run_report, clock=SystemClock())
        await runner.start()
        runtime.late.schedules = runner
        log.info("schedules.running", names=[s.name for s in config.schedules])


async def stop_unprompted(runtime: Runtime) -> None:
    """Stop the schedules and wait for the alert deliveries in progress (before the gateway closes its turns)."""
    late = runtime.late
    runner, late.schedules = late.schedules, None
    if runner is not None:
        await runner.aclose()
    desk, late.alert_desk = late.alert_desk, None
    if desk is not None:
        await desk.aclose()
