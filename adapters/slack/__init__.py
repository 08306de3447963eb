"""Slack: mentions, DMs, thread follow-ups and the assistant pane, streamed into one message per question.

``create_adapter(config, runtime)`` is what ``botgateway run`` calls; tests
build :class:`SlackAdapter` directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.slack.adapter import SlackAdapter, SlackStartError
from adapters.slack.sink import SlackCardSink

if TYPE_CHECKING:
    from botgateway.config import SlackConfig

__all__ = ["SlackAdapter", "SlackCardSink", "SlackStartError", "create_adapter"]


def create_adapter(config: SlackConfig, runtime: Any) -> SlackAdapter:
    """The Slack adapter for ``runtime`` (its Store for thread lookups, its rate budget)."""
    return SlackAdapter(config, store=runtime.store, budget=getattr(runtime, "budget", None))
