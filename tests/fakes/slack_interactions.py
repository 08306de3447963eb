"""The fake Slack's interactions: button presses with their trigger ids, and the modals they open.

:class:`SlackInteractions` is the part of :class:`~tests.fakes.slack.FakeSlack`
that builds the ``block_actions`` payload of a button press (with a fresh
``trigger_id``), answers ``views.open`` (each trigger opens one modal, within
:data:`TRIGGER_TTL_S`, like Slack's) and builds the ``view_submission`` payload
of an opened modal.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

__all__ = ["TRIGGER_TTL_S", "SlackInteractions"]

TRIGGER_TTL_S = 3.0
"""A ``trigger_id`` opens a modal within this long after its interaction, once (Slack's rule)."""


class SlackInteractions:
    """Button presses and modals (a mixin of :class:`~tests.fakes.slack.FakeSlack`)."""

    team_id: str
    bot_id: str
    base: str
    _ts: itertools.count[int]

    def _init_interactions(self) -> None:
        """Start with no modal opened and no trigger handed out (called from the fake's ``__init__``)."""
        self.views: list[dict[str, Any]] = []
        """Modals opened with ``views.open`` (each view as sent, with the ``id`` given to it), in order."""
        self._triggers: dict[str, tuple[float, str]] = {}

    def block_action(self, *, user: str, channel: str, message_ts: str, action_id: str, value: str,
                     thread_ts: str | None = None, action_type: str = "button",
                     block_id: str = "botgateway_stop") -> dict[str, Any]:
        """A ``block_actions`` interactive payload for a button press (``action_type``: ``feedback_buttons`` for one
        of Slack's feedback buttons, whose ``value`` is the pressed one's), with a fresh ``trigger_id``."""
        trigger_id = f"{next(self._ts)}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:16]}"
        self._triggers[trigger_id] = (time.monotonic(), user)
        return {
            "type": "block_actions",
            "team": {"id": self.team_id, "domain": "fake"},
            "user": {"id": user, "username": user, "team_id": self.team_id},
            "api_app_id": "A0001",
            "token": "verification-token",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False},
            "trigger_id": trigger_id,
            "channel": {"id": channel, "name": "ops"},
            "message": {"ts": message_ts, "thread_ts": thread_ts, "type": "message", "bot_id": self.bot_id},
            "response_url": f"{self.base}/response",
            "actions": [{"action_id": action_id, "block_id": block_id, "value": value, "type": action_type,
                         "action_ts": f"{time.time():.6f}"}],
        }

    def view_submission(self, view: dict[str, Any], *, user: str, values: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The ``view_submission`` payload of an opened modal (from :attr:`views`) submitted by ``user``.

        ``values``: ``{block_id: {action_id: value}}``; a plain-text input left empty is ``None``, as Slack sends it.
        """
        state = {block: {action: {"type": "plain_text_input", "value": value} for action, value in actions.items()}
                 for block, actions in values.items()}
        return {
            "type": "view_submission",
            "team": {"id": self.team_id, "domain": "fake"},
            "user": {"id": user, "username": user, "name": user, "team_id": self.team_id},
            "api_app_id": "A0001",
            "token": "verification-token",
            "trigger_id": f"{next(self._ts)}.{uuid.uuid4().hex[:12]}",
            "view": {**view, "state": {"values": state}, "team_id": self.team_id, "app_id": "A0001",
                     "bot_id": self.bot_id, "hash": uuid.uuid4().hex[:12]},
            "response_urls": [],
            "is_enterprise_install": False,
        }

    def _m_views_open(self, args: dict[str, Any]) -> dict[str, Any] | str:
        trigger = self._triggers.pop(str(args.get("trigger_id") or ""), None)
        if trigger is None:
            return "invalid_trigger_id" if not args.get("trigger_id") else "trigger_exchanged"
        if time.monotonic() - trigger[0] > TRIGGER_TTL_S:
            return "expired_trigger_id"
        view = args.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                return "invalid_arguments"
        if not isinstance(view, dict) or view.get("type") != "modal" or not isinstance(view.get("blocks"), list):
            return "invalid_arguments"
        title = (view.get("title") or {}).get("text", "")
        if not title or len(title) > 24 or len(str(view.get("private_metadata") or "")) > 3000:
            return "invalid_arguments"
        opened = {**view, "id": f"V{uuid.uuid4().hex[:10].upper()}", "opened_by": trigger[1]}
        self.views.append(opened)
        return {"view": opened}
