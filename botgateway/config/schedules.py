"""The ``schedules:`` section: reports the bot posts on a cron schedule.

```yaml
schedules:
  - name: stopped-prod
    cron: "0 9 * * 1-5"                   # minute hour day-of-month month day-of-week
    timezone: Asia/Shanghai
    to: ["dingtalk:cid…"]
    prompt: "List the stopped servers in prod, grouped by account"
    role: oncall
```

Each report runs the tool loop as the principal ``schedule:<name>`` with the
access role ``role``, and posts one card to each destination. Whether the role
and the destinations' adapters exist is checked with the whole file
(:class:`~botgateway.config.schema.Config`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter
from pydantic import Field, field_validator

from botgateway.config.alerts import valid_destinations, valid_name
from botgateway.config.section import Section

__all__ = ["ScheduleConfig"]

_CRON_FIELDS = 5
_SOME_MOMENT = datetime(2024, 1, 1, tzinfo=UTC)
"""Where a cron expression is tried from (a leap year, so 29 February counts as a date)."""
_CRON_HELP = "five fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5' (09:00 on weekdays)"


class ScheduleConfig(Section):
    """One scheduled report."""

    name: str
    """Unique name; the report runs as the principal ``schedule:<name>``."""
    cron: str
    """When it runs: a five-field cron expression (``0 9 * * 1-5``), or ``@daily``, ``@hourly``, …"""
    timezone: str = "UTC"
    """The IANA time zone the cron fields are read in (``Asia/Shanghai``)."""
    to: list[str]
    """Destinations: ``slack:<channel id>`` or ``dingtalk:<openConversationId>``; one card each."""
    prompt: str
    """The question the report asks the model."""
    role: str
    """The access role the report runs as (a role under ``access.roles``)."""
    grace_s: float = Field(600.0, ge=0)
    """A slot missed while the gateway was down runs at start-up if it is at most this old; older, it is skipped."""
    locale: Literal["en", "zh-CN"] = "en"
    """Language of the report card's fixed strings."""

    _name = field_validator("name")(lambda cls, v: valid_name(v))
    _to = field_validator("to")(lambda cls, v: valid_destinations(v))

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        expression = " ".join(value.split())
        # Five fields only: croniter reads a sixth as seconds at the end, where Quartz and Spring put seconds
        # first, so "0 0 9 * * ?" copied from one of them would run at another time than meant.
        if not expression.startswith("@") and len(expression.split()) != _CRON_FIELDS:
            raise ValueError(f"has {len(expression.split())} fields; a cron expression has {_CRON_HELP}")
        try:
            # The next run from a fixed moment: an expression that never matches (0 9 31 2 *) fails here too.
            croniter(expression, _SOME_MOMENT).get_next(datetime)
        except CroniterBadDateError:
            raise ValueError(f"never runs (no such date); use {_CRON_HELP}") from None
        except (CroniterError, ValueError, KeyError) as exc:
            raise ValueError(f"not a valid cron expression ({_plain(exc)}); use {_CRON_HELP}") from None
        return expression

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("not a known time zone; use an IANA name such as Asia/Shanghai or UTC") from None
        return value

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if not value:
            raise ValueError("is empty; name the access role the report runs as (a role under access.roles)")
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write the question the report asks")
        return value.strip()


def _plain(error: Exception) -> str:
    """croniter's reason without the expression it repeats in brackets (the message shows it once already)."""
    return re.sub(r"^\[[^\]]*\]\s*", "", str(error)) or type(error).__name__
