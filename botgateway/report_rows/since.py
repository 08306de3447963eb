"""A report's ``since``: an age (``30m``, ``1h``, ``2d``, ``1w``) or an ISO date or time, as Unix time."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

__all__ = ["parse_since"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float | None = None) -> float:
    """``1h``, ``30m``, ``2d``, ``1w`` ago, or an ISO date or time (UTC unless it says otherwise), as Unix time.

    Raises :class:`ValueError` saying what is accepted.
    """
    now = time.time() if now is None else now
    age = _AGE.match(text)
    if age:
        return now - float(age.group(1)) * _UNIT_S[age.group(2).lower()]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an age (30m, 1h, 2d, 1w) nor an ISO date or time (2026-11-30, 2026-11-30T08:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
