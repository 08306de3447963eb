"""What the Slack adapter did with one delivery from Slack: the record its observer, logs and tests see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from botgateway.messages import Submission

__all__ = ["Delivery"]


@dataclass(frozen=True)
class Delivery:
    """What the adapter did with one Slack delivery (for metrics, logs and tests)."""

    event_type: str
    """``app_mention``, ``message``, ``assistant_thread_started``, ``block_actions``, ``view_submission``…"""
    outcome: Literal["submitted", "ignored", "duplicate", "failed", "handled"]
    """submitted to the gateway, ignored (and why), a retried duplicate, failed, or handled without a turn."""
    reason: str = ""
    """Why it was ignored or failed, in a few words."""
    submission: Submission | None = None
    """The gateway's answer for submitted messages (``await submission.done`` waits for the final card)."""
