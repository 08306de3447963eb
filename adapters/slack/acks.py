"""The sign a question was taken: a reaction on the asker's message, at once, costing no message in the channel.

In an incident thirty people may ask in one channel within a second; the
channel takes about one new message a second, so most answers wait their turn
(:mod:`adapters.slack.channel_line`) and show nothing for a while. A reaction
(``ack_reaction``, 👀 by default) is not a message: it goes out at once, on the
workspace's own ``reactions.add`` budget (Tier 3), and tells each asker that
their question is being answered. It is a nicety: a failure is logged and the
answer comes all the same. The assistant pane shows its status instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from adapters.slack.errors import classify, slack_error_code
from adapters.slack.limits import SlackBuckets, paced
from botgateway.background import BackgroundTasks
from botgateway.sink import CallPacer, CardTarget

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from botgateway.config import SlackConfig

__all__ = ["ACK_ATTEMPTS", "QuestionAcks"]

log = structlog.get_logger(__name__)

ACK_ATTEMPTS = 2
"""Tries of one reaction when Slack throttles it (the pacer pauses the bucket in between)."""

_ALREADY = frozenset({"already_reacted"})
"""Answers that mean the reaction is there (a retried delivery of the same question)."""


class QuestionAcks:
    """Adds the configured reaction to each question taken, in the background, paced by the workspace's budget."""

    def __init__(self, client: AsyncWebClient, config: SlackConfig, *, pacer: CallPacer | None,
                 tasks: BackgroundTasks) -> None:
        """``tasks`` owns the background calls (closed with the adapter); ``pacer`` pays them from the gateway's
        budget (None: unpaced)."""
        self._client = client
        self._name = config.ack_reaction
        self._buckets = SlackBuckets.from_config(config)
        self._pacer = pacer
        self._tasks = tasks

    @property
    def enabled(self) -> bool:
        """Whether a reaction is configured."""
        return bool(self._name)

    def taken(self, team: str, channel: str, ts: str) -> None:
        """React to message ``ts`` of ``channel`` in workspace ``team`` (in the background; returns at once)."""
        if not self._name or not channel or not ts:
            return
        self._tasks.spawn(self._react(team, channel, ts), name=f"slack-ack:{channel}:{ts}")

    async def _react(self, team: str, channel: str, ts: str) -> None:
        where = CardTarget(platform="slack", chat_id=channel, workspace_id=team)

        async def react() -> None:
            try:
                await self._client.reactions_add(channel=channel, timestamp=ts, name=self._name)
            except Exception as exc:
                if slack_error_code(exc) not in _ALREADY:  # already there: a retried delivery of the same question
                    raise classify(exc) from None

        try:
            await paced(self._pacer, self._buckets.reaction_bucket(where), react,
                        owner=f"slack-ack:{channel}:{ts}", priority=True, attempts=ACK_ATTEMPTS)
        except Exception as exc:  # a nicety: the answer still comes
            log.info("slack.ack_failed", channel=channel, error=str(exc) or type(exc).__name__)
