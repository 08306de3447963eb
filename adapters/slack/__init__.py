"""Slack: mentions, DMs, thread follow-ups and the assistant pane, streamed into one message per question.

``botgateway run`` builds :class:`SlackAdapter` with the runtime's Store and a
pacer over its rate budget: ``SlackAdapter(config, store=..., pacer=...)``.
"""

from __future__ import annotations

from adapters.slack.adapter import Delivery, SlackAdapter
from adapters.slack.connection import SlackStartError
from adapters.slack.sink import SlackCardSink

__all__ = ["Delivery", "SlackAdapter", "SlackCardSink", "SlackStartError"]
