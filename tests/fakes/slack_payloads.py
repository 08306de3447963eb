"""What the fake Slack sends the app: Events API bodies (mentions, messages) and an HTTP event's signature.

:class:`SlackEvents` is the part of :class:`~tests.fakes.slack.FakeSlack` that
builds ``app_mention`` and ``message`` events, wraps them in an
``event_callback`` body, and signs a raw body with :data:`SIGNING_SECRET` the
way Slack signs an HTTP event (interactions are :mod:`tests.fakes.slack_interactions`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["SIGNING_SECRET", "SlackEvents"]

SIGNING_SECRET = "fake-signing-secret"
"""The secret the fake signs HTTP events with (the app's ``signing_secret`` in tests)."""


class SlackEvents:
    """Builders of Events API payloads (a mixin of :class:`~tests.fakes.slack.FakeSlack`)."""

    team_id: str
    bot_user_id: str
    new_ts: Callable[[], str]

    @staticmethod
    def sign(body: str | bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
        """Headers Slack sends with an HTTP event: timestamp and ``v0=`` HMAC signature (of the raw bytes)."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        raw = body.encode() if isinstance(body, str) else body
        digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}", "Content-Type": "application/json"}

    def event_payload(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """An Events API ``event_callback`` body around ``event``."""
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": "A0001",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}],
        }

    def mention(self, text: str, *, user: str = "U1", channel: str = "C1", ts: str | None = None,
                thread_ts: str | None = None) -> dict[str, Any]:
        """An ``app_mention`` event (``text`` gets the bot mention prepended)."""
        event = {"type": "app_mention", "user": user, "text": f"<@{self.bot_user_id}> {text}", "ts": ts or self.new_ts(),
                 "channel": channel, "team": self.team_id, "event_ts": ts or ""}
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def message(self, text: str, *, user: str = "U1", channel: str = "C1", channel_type: str = "channel",
                ts: str | None = None, thread_ts: str | None = None, **extra: Any) -> dict[str, Any]:
        """A ``message`` event."""
        event = {"type": "message", "user": user, "text": text, "ts": ts or self.new_ts(), "channel": channel,
                 "channel_type": channel_type, "team": self.team_id, **extra}
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event
