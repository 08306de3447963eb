"""Scheduled reports: when each schedule is due (:mod:`~botgateway.schedules.slots`) and running it on time,
once per slot across the fleet (:mod:`~botgateway.schedules.runner`)."""

from __future__ import annotations

from botgateway.schedules.runner import CLAIM_TTL_MIN_S, ON_TIME_S, ScheduleRunner, SystemClock, WallClock
from botgateway.schedules.slots import next_runs, next_slot, previous_slot, slot_key, zone

__all__ = [
    "CLAIM_TTL_MIN_S", "ON_TIME_S", "ScheduleRunner", "SystemClock", "WallClock",
    "next_runs", "next_slot", "previous_slot", "slot_key", "zone",
]
