"""The Slack AI assistant pane: suggested prompts when a thread opens, a status while its answer is worked on.

Both are niceties: a failed call is logged and the answer streams all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import structlog

from adapters.slack.errors import slack_error_code
from adapters.slack.events import suggested_prompts
from botgateway.messages import Submission
from botgateway.strings import t

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig

__all__ = ["AssistantPane"]

log = structlog.get_logger(__name__)


class AssistantPane:
    """Suggested prompts and the working status of the assistant pane's threads.

    Args:
        client: The bot's Web API client.
        config: The ``adapters.slack`` section (its prompts and status text).
        first_delivery: False for a retried delivery of an event already seen.
    """

    def __init__(self, client: AsyncWebClient, config: SlackConfig,
                 first_delivery: Callable[[Mapping[str, Any]], Awaitable[bool]]) -> None:
        self._client = client
        self._config = config
        self._first_delivery = first_delivery

    async def thread_started(
        self, body: Mapping[str, Any], event: Mapping[str, Any]
    ) -> tuple[Literal["ignored", "duplicate", "failed", "handled"], str]:
        """A pane thread opened: offer the configured prompts; what came of it (the outcome and why)."""
        thread = event.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        prompts = suggested_prompts(self._config)
        if not channel or not thread_ts or not prompts:
            return "ignored", "no thread or no prompts configured"
        if not await self._first_delivery(body):
            return "duplicate", "retried delivery"
        try:
            await self._client.assistant_threads_setSuggestedPrompts(channel_id=channel, thread_ts=thread_ts,
                                                                      prompts=prompts)
        except Exception as exc:
            code = slack_error_code(exc) or type(exc).__name__
            log.warning("slack.suggested_prompts_failed", error=code)
            return "failed", code
        return "handled", ""

    async def follow(self, submission: Submission, channel: str, status_thread: str | None) -> None:
        """Show the pane's status in ``status_thread`` (if any) while the turn works, until its card is final."""
        try:
            if status_thread:
                status = self._config.status_text or t(self._config.locale, "thinking_status")
                await self._set_status(channel, status_thread, status)
            if submission.done is not None:
                await asyncio.shield(submission.done)
        finally:
            if status_thread:
                await self._set_status(channel, status_thread, "")

    async def _set_status(self, channel: str, thread_ts: str, status: str) -> None:
        try:
            await self._client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status=status)
        except Exception as exc:  # the pane status is a nicety; the answer still streams
            log.info("slack.set_status_failed", error=slack_error_code(exc) or type(exc).__name__)
