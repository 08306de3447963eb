"""The Slack side: :class:`~tests.fakes.slack.FakeSlack` with Slack's published rate limits.

Limits (per workspace unless noted, sliding windows, HTTP 429 + ``Retry-After``
past them): ``chat.update`` and ``chat.delete`` 50/min (Tier 3),
``chat.startStream`` and ``chat.stopStream`` 20/min (Tier 2),
``chat.appendStream`` 100/min (Tier 4), and a channel's new messages about
1/s with short bursts (``post_burst`` per ``post_burst`` seconds), whatever
method makes them: ``chat.postMessage`` and, when stream starts are counted
(the default, and the incident's first variant), ``chat.startStream``, in
threads too.

Mention *i* is an ``app_mention`` from user ``U000i`` (display name
``user<i>``) in channel ``settings.channel_of(i)`` (in an incident, all in
``C0000``); the bot answers in its thread, so the thread identifies the turn.

With one replica the mention goes over Socket Mode. A fleet of K replicas
takes Slack's events over HTTP, each replica on its own port: the side, as
Slack behind a load balancer, posts mention *i* signed to replica ``i % K``
and then the same event (the same ``event_id``) to every other replica, as
Slack's retries and a balancer spreading them would deliver it. The
mention's moment is noted before the first post.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from adapters.slack.render import STOP_ACTION_ID
from bench.floor import CHANNEL, slack_limits
from bench.model import user_text
from bench.observe import View
from bench.settings import BenchSettings
from bench.side import PlatformSide, per_second
from botgateway.cards.render import CURSOR
from botgateway.strings import t
from tests.fakes.slack import FakeSlack, Message, Window
from tests.ports import free_port

LOCALE = "en"
PLACEHOLDERS = tuple(t(LOCALE, key) for key in ("thinking", "working", "queued", "control_working"))
"""Texts that only a message still at work shows."""
ANSWER_HEAD = 24
"""Characters of an answer's beginning (``**web-<i>** (10.0.…``, the turn's own) that make a message an answer."""
POST_TIMEOUT_S = 30.0
"""How long one event post to a replica may take before it counts as undelivered."""


def body(msg: Message) -> str:
    """Every markdown (or section) block of the message, in order, else its ``text``: a card with a preamble (a
    resumed answer's note) shows it in a block of its own above the answer."""
    texts = [str(b.get("text", "")) for b in msg.blocks if b.get("type") == "markdown"]
    texts += [str(b["text"].get("text", "")) for b in msg.blocks
              if b.get("type") == "section" and isinstance(b.get("text"), dict)]
    return "\n".join(texts) if texts else msg.text


def _shown_text(msg: Message) -> str:
    """The message's body and its context lines (a stream's Stop control says "working" in a context block)."""
    context = [str(e.get("text", "")) for b in msg.blocks if b.get("type") == "context" for e in b.get("elements", [])]
    return "\n".join([body(msg), *context])


def looks_live(msg: Message) -> bool:
    """A placeholder, a cursor, a Stop button or an open stream: the message says it is still working."""
    text = _shown_text(msg)
    if msg.streaming or CURSOR in text or any(p in text for p in PLACEHOLDERS):
        return True
    return any(b.get("action_id") == STOP_ACTION_ID for b in msg.buttons())


class SlackSide(PlatformSide):
    """Fake Slack for one scenario."""

    platform = "slack"
    methods = ("chat.postMessage", "chat.update", "chat.delete", "chat.startStream", "chat.appendStream", "chat.stopStream",
               "reactions.add")

    def __init__(self, settings: BenchSettings, answers: list[str], *, replicas: int = 1, one_channel: bool = False,
                 stream_starts_counted: bool = True) -> None:
        """``one_channel``: every mention in ``C0000`` (the incident); ``stream_starts_counted``: a
        ``chat.startStream`` is one of its channel's new messages."""
        super().__init__(answers)
        self.settings = settings
        self.one_channel = one_channel
        self.replicas = replicas
        """Replicas the events go to over HTTP (1: Socket Mode)."""
        self.events_urls: list[str] = []
        """Each replica's Events API URL, in replica order (empty: Socket Mode)."""
        self.delivered = 0
        """Event posts a replica answered 200."""
        self.delivery_failures: list[str] = []
        """Event posts a replica did not answer 200 (what answered, or the error)."""
        self._posts: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None
        limits = slack_limits(settings.post_burst)
        channel = limits.pop(CHANNEL)
        windows = {method: Window(limit.calls, limit.seconds, "workspace") for method, limit in limits.items()}
        self.fake = FakeSlack(limits=windows, limit_style="http429", latency_s=settings.latency_ms / 1000.0,
                              channel_limit=Window(channel.calls, channel.seconds, "channel"),
                              stream_starts_per_channel=stream_starts_counted)
        self._threads: dict[tuple[str, str], int] = {}
        continued = [t(LOCALE, "continued"), *(t(LOCALE, "continuation", part=k) for k in range(2, 10))]
        for watch in self.watches:
            name = f"user{watch.turn}"
            self.fake.user_names[self.user(watch.turn)] = name
            watch.decorations = (f"@{name}", t(LOCALE, "resumed"), *continued)
        self.fake.watch(self._on_change)

    @staticmethod
    def user(turn: int) -> str:
        """The Slack user id of mention ``turn``'s asker."""
        return f"U{turn:04d}"

    def channel(self, turn: int) -> str:
        """The channel mention ``turn`` is in."""
        return f"C{0 if self.one_channel else self.settings.channel_of(turn):04d}"

    async def start(self) -> dict[str, Any]:
        """Serve the Web API and Socket Mode; the worker's adapter points its ``api_base_url`` here.

        A fleet's replicas get ``http_ports``, one each, where they take the events this side posts.
        """
        started: dict[str, Any] = {"platform_url": await self.fake.start()}
        if self.replicas > 1:
            ports = [free_port() for _ in range(self.replicas)]
            self.events_urls = [f"http://127.0.0.1:{port}/slack/events" for port in ports]
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_S))
            started["http_ports"] = ports
        return started

    async def wait_connected(self, timeout: float) -> None:
        """Until the adapter's Socket Mode client is connected (a fleet's replicas listen once they said ready)."""
        if self.replicas == 1:
            await self.fake.wait_connected(timeout)

    async def push(self, turn: int) -> None:
        """An ``app_mention`` envelope over the socket, or posted to every replica; the moment is the mention's
        inbound time."""
        event = self.fake.mention(user_text(turn), user=self.user(turn), channel=self.channel(turn))
        self._threads[(event["channel"], event["ts"])] = turn
        payload = self.fake.event_payload(event)
        self.watches[turn].inbound_at = time.monotonic()
        if self.replicas == 1:
            await self.fake.push(payload)
            return
        # The posts go on in the background: a burst's mentions all arrive at once, as from Slack.
        task = asyncio.create_task(self._deliver(turn, json.dumps(payload)))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    async def _deliver(self, turn: int, body: str) -> None:
        """Mention ``turn`` to replica ``turn % K`` first, then the same event to every other replica."""
        first = turn % self.replicas
        await self._post(self.events_urls[first], body)
        await asyncio.gather(*(self._post(url, body) for i, url in enumerate(self.events_urls) if i != first))

    async def _post(self, url: str, body: str) -> None:
        assert self._http is not None
        try:
            async with self._http.post(url, data=body, headers=self.fake.sign(body)) as response:
                if response.status == 200:
                    self.delivered += 1
                else:
                    self.delivery_failures.append(f"{url}: {response.status} {(await response.text())[:120]!r}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.delivery_failures.append(f"{url}: {type(exc).__name__}: {exc}")

    def answer_messages(self) -> list[int]:
        """Per turn, the bot messages in its thread that show the start of its answer (more than one: answered
        twice)."""
        counts = [0] * len(self.watches)
        for msg in self.fake.messages.values():
            turn = self._threads.get((msg.channel, msg.thread_ts or ""))
            if turn is not None and self.watches[turn].answer[:ANSWER_HEAD] in body(msg):
                counts[turn] += 1
        return counts

    def whole_answer_messages(self) -> list[int]:
        """Per turn, the bot messages in its thread that show the whole answer (more than one: a question answered
        twice; a message an interrupted attempt left with part of the answer does not count)."""
        counts = [0] * len(self.watches)
        for msg in self.fake.messages.values():
            turn = self._threads.get((msg.channel, msg.thread_ts or ""))
            if turn is not None and self.watches[turn].answer in body(msg):
                counts[turn] += 1
        return counts

    def throttles_per_channel(self) -> dict[str, int]:
        """Throttled calls (429) per channel they were for, every method together."""
        counts: dict[str, int] = {}
        for call in self.fake.calls:
            if call.error == "ratelimited" or call.status == 429:
                channel = str(call.args.get("channel", ""))
                counts[channel] = counts.get(channel, 0) + 1
        return counts

    def _on_change(self, msg: Message, change: str, at: float) -> None:
        turn = self._threads.get((msg.channel, msg.thread_ts or ""))
        if turn is None:
            return
        watch = self.watches[turn]
        was_done = watch.done
        view = None if change == "delete" else View(msg.ts, float(msg.ts), body(msg), looks_live(msg))
        watch.update(view, msg.ts, at)
        self._after_update(watch, was_done)

    def live_left(self) -> dict[str, Any]:
        """Bot messages still showing a placeholder, a cursor, a Stop button, or still streaming."""
        live = [m for m in self.fake.messages.values() if looks_live(m)]
        return {"count": len(live), "examples": [f"{m.channel}/{m.ts}: {body(m)[:60]!r}" for m in live[:5]]}

    def counts(self) -> dict[str, dict[str, int]]:
        """Per Web API method."""
        return self.fake.method_counts()

    def timeline(self, since: float) -> dict[str, dict[str, list[int]]]:
        """Per method per second (the card methods only)."""
        calls = ((c.method, c.at, c.error == "ratelimited" or c.status == 429) for c in self.fake.calls if c.method in self.methods)
        return per_second(calls, since)

    async def stop(self) -> None:
        """Close the socket and the server (after the event posts still under way, if any)."""
        await asyncio.gather(*self._posts, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        await self.fake.stop()
