"""The asker's display name: from the event, else ``users.info`` (cached), else the user id."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from cachetools import LRUCache

from adapters.slack.errors import slack_error_code

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["DisplayNames"]

log = structlog.get_logger(__name__)

_MAX_NAMES = 10_000
"""Display names cached at most."""

_LOOKUP_TIMEOUT_S = 2.0
"""How long a ``users.info`` lookup may hold up a turn; past it the user id stands in."""


class DisplayNames:
    """Display names of Slack users, cached (the least recently used are forgotten)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._names: LRUCache[str, str] = LRUCache(_MAX_NAMES)

    async def of(self, user: str, profile: Any) -> str:
        """``user``'s display name; ``profile`` is the event's ``user_profile``, when it has one."""
        if isinstance(profile, Mapping):
            name = str(profile.get("display_name") or profile.get("real_name") or "")
            if name:
                self._names[user] = name
                return name
        if not user:
            return ""
        if user in self._names:
            return self._names[user]
        name = user
        try:
            info = await asyncio.wait_for(self._client.users_info(user=user), _LOOKUP_TIMEOUT_S)
            data = info.get("user") or {}
            found = (data.get("profile") or {}).get("display_name") or data.get("real_name") or data.get("name")
            name = str(found or user)
        except Exception as exc:  # a missing users:read scope only costs the nicer name
            log.debug("slack.users_info_failed", error=slack_error_code(exc) or type(exc).__name__)
        self._names[user] = name
        return name
