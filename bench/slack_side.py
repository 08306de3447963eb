"""The Slack side: :class:`~tests.fakes.slack.FakeSlack` with Slack's published rate limits.

Limits (per workspace unless noted, sliding windows, HTTP 429 + ``Retry-After``
past them): ``chat.update`` and ``chat.delete`` 50/min (Tier 3),
``chat.startStream`` and ``chat.stopStream`` 20/min (Tier 2),
``chat.appendStream`` 100/min (Tier 4), ``chat.postMessage`` about 1/s per
channel with short bursts (``post_burst`` per ``post_burst`` seconds).

Mention *i* is an ``app_mention`` from user ``U000i`` (display name
``user<i>``) in channel ``settings.channel_of(i)``; the bot answers in its
thread, so the thread identifies the turn.
"""

from __future__ import annotations

import time
from typing import Any

from adapters.slack.render import STOP_ACTION_ID
from bench.floor import slack_limits
from bench.model import user_text
from bench.observe import View
from bench.settings import BenchSettings
from bench.side import PlatformSide, per_second
from botgateway.cards.render import CURSOR
from botgateway.strings import t
from tests.fakes.slack import FakeSlack, Message, Window

LOCALE = "en"
PLACEHOLDERS = tuple(t(LOCALE, key) for key in ("thinking", "working", "queued", "control_working"))
"""Texts that only a message still at work shows."""


def _shown_text(msg: Message) -> str:
    """The message's body and its context lines (a stream's Stop control says "working" in a context block)."""
    context = [str(e.get("text", "")) for b in msg.blocks if b.get("type") == "context" for e in b.get("elements", [])]
    return "\n".join([msg.markdown(), *context])


def looks_live(msg: Message) -> bool:
    """A placeholder, a cursor, a Stop button or an open stream: the message says it is still working."""
    text = _shown_text(msg)
    if msg.streaming or CURSOR in text or any(p in text for p in PLACEHOLDERS):
        return True
    return any(b.get("action_id") == STOP_ACTION_ID for b in msg.buttons())


class SlackSide(PlatformSide):
    """Fake Slack for one scenario."""

    platform = "slack"
    methods = ("chat.postMessage", "chat.update", "chat.delete", "chat.startStream", "chat.appendStream", "chat.stopStream")

    def __init__(self, settings: BenchSettings, answers: list[str]) -> None:
        super().__init__(answers)
        self.settings = settings
        windows = {
            method: Window(limit.calls, limit.seconds, "channel" if limit.per_channel else "workspace")
            for method, limit in slack_limits(settings.post_burst).items()
        }
        self.fake = FakeSlack(limits=windows, limit_style="http429", latency_s=settings.latency_ms / 1000.0)
        self._threads: dict[tuple[str, str], int] = {}
        continued = [t(LOCALE, "continued"), *(t(LOCALE, "continuation", part=k) for k in range(2, 10))]
        for watch in self.watches:
            name = f"user{watch.turn}"
            self.fake.user_names[self.user(watch.turn)] = name
            watch.decorations = (f"@{name}", *continued)
        self.fake.watch(self._on_change)

    @staticmethod
    def user(turn: int) -> str:
        """The Slack user id of mention ``turn``'s asker."""
        return f"U{turn:04d}"

    def channel(self, turn: int) -> str:
        """The channel mention ``turn`` is in."""
        return f"C{self.settings.channel_of(turn):04d}"

    async def start(self) -> dict[str, Any]:
        """Serve the Web API and Socket Mode; the worker's adapter points its ``api_base_url`` here."""
        return {"platform_url": await self.fake.start()}

    async def wait_connected(self, timeout: float) -> None:
        """Until the adapter's Socket Mode client is connected."""
        await self.fake.wait_connected(timeout)

    async def push(self, turn: int) -> None:
        """An ``app_mention`` envelope over the socket; the moment is the mention's inbound time."""
        event = self.fake.mention(user_text(turn), user=self.user(turn), channel=self.channel(turn))
        self._threads[(event["channel"], event["ts"])] = turn
        payload = self.fake.event_payload(event)
        self.watches[turn].inbound_at = time.monotonic()
        await self.fake.push(payload)

    def _on_change(self, msg: Message, change: str, at: float) -> None:
        turn = self._threads.get((msg.channel, msg.thread_ts or ""))
        if turn is None:
            return
        watch = self.watches[turn]
        was_done = watch.done
        view = None if change == "delete" else View(msg.ts, float(msg.ts), msg.markdown(), looks_live(msg))
        watch.update(view, msg.ts, at)
        self._after_update(watch, was_done)

    def live_left(self) -> dict[str, Any]:
        """Bot messages still showing a placeholder, a cursor, a Stop button, or still streaming."""
        live = [m for m in self.fake.messages.values() if looks_live(m)]
        return {"count": len(live), "examples": [f"{m.channel}/{m.ts}: {m.markdown()[:60]!r}" for m in live[:5]]}

    def counts(self) -> dict[str, dict[str, int]]:
        """Per Web API method."""
        return self.fake.method_counts()

    def timeline(self, since: float) -> dict[str, dict[str, list[int]]]:
        """Per method per second (the card methods only)."""
        calls = ((c.method, c.at, c.error == "ratelimited" or c.status == 429) for c in self.fake.calls if c.method in self.methods)
        return per_second(calls, since)

    async def stop(self) -> None:
        """Close the socket and the server."""
        await self.fake.stop()
