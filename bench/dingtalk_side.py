"""The DingTalk side: :class:`~tests.fakes.dingtalk.FakeDingTalk` with one QPS limit for the app's card APIs.

``createAndDeliver``, ``PUT /v1.0/card/streaming`` and ``PUT
/v1.0/card/instances`` together accept ``dingtalk_qps`` calls per sliding
second and answer HTTP 403 ``QpsLimit`` past it (throttled calls count
against the second too, as DingTalk's do). Robot messages (session webhook,
group send) are not limited by the fake.

Mention *i* is a group @-message from ``staff000i`` (nick ``user<i>``) in
group ``cidBench000i==``: DingTalk's conversations are per group, and the
gateway runs one turn per conversation at a time, so N concurrent questions
come from N groups. The card's ``openSpaceId`` (or the message's session)
identifies the turn.

A fleet of K replicas (``--replicas``) holds K Stream connections, one per
process; the fake hands the messages to them in turn, as DingTalk balances an
app's connections.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from bench.model import user_text
from bench.observe import View
from bench.settings import BenchSettings
from bench.side import PlatformSide, per_second
from botgateway.strings import t
from tests.fakes.dingtalk import CARD_PATHS, FakeCard, FakeDingTalk, SentMessage, bot_message

LOCALE = "zh-CN"

METHOD_NAMES = {
    "POST /v1.0/card/instances/createAndDeliver": "card create",
    "PUT /v1.0/card/streaming": "card stream",
    "PUT /v1.0/card/instances": "card update",
    "POST /robot/sendBySession": "message (session webhook)",
    "POST /v1.0/robot/groupMessages/send": "message (group)",
    "POST /v1.0/robot/oToMessages/batchSend": "message (1:1)",
}
"""Report names of the calls the bench follows; others (token, connection) keep their path."""


class DingTalkSide(PlatformSide):
    """Fake DingTalk for one scenario."""

    platform = "dingtalk"
    methods = ("card create", "card stream", "card update", "message (session webhook)", "message (group)")

    def __init__(self, settings: BenchSettings, answers: list[str], *, replicas: int = 1) -> None:
        """``replicas``: the Stream connections to wait for, one per gateway process."""
        super().__init__(answers)
        self.settings = settings
        self.replicas = replicas
        self.fake = FakeDingTalk(qps_limit=settings.dingtalk_qps, latency_s=settings.latency_ms / 1000.0)
        self._order = itertools.count()
        self._keys: dict[int, tuple[str, float]] = {}
        """Per card or message object: its key and its place in creation order."""
        continued = [t(LOCALE, "continued"), *(t(LOCALE, "continuation", part=k) for k in range(2, 10))]
        for watch in self.watches:
            name = f"user{watch.turn}"
            watch.decorations = (f"**@{name}**", f"@{name}", f"@{self.staff(watch.turn)}", *continued)
        self.fake.watch(self._on_change)

    @staticmethod
    def staff(turn: int) -> str:
        """The staff id of mention ``turn``'s asker."""
        return f"staff{turn:04d}"

    @staticmethod
    def group(turn: int) -> str:
        """The group conversation id of mention ``turn``."""
        return f"cidBench{turn:04d}=="

    async def start(self) -> dict[str, Any]:
        """Serve the stream gateway and OpenAPI; the worker's adapter points both base URLs here."""
        url = await self.fake.start()
        return {"platform_url": url, "client_id": self.fake.client_id, "client_secret": self.fake.client_secret}

    async def wait_connected(self, timeout: float) -> None:
        """Until every replica's Stream-mode websocket is open."""
        await self.fake.wait_connected(timeout)
        deadline = time.monotonic() + timeout
        while sum(1 for ws in self.fake.sockets if not ws.closed) < self.replicas:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.fake.sockets)} of {self.replicas} Stream connections open")
            await asyncio.sleep(0.05)  # the fake announces no connection; a fleet's start is not measured

    async def push(self, turn: int) -> None:
        """A bot-message ``CALLBACK`` frame; the moment is the mention's inbound time."""
        group = self.group(turn)
        data = bot_message(user_text(turn), conversation_id=group, staff_id=self.staff(turn), nick=f"user{turn}",
                           webhook=self.fake.session_webhook(group), robot_code=self.fake.client_id)
        self.watches[turn].inbound_at = time.monotonic()
        await self.fake.push_bot_message(data)

    def _turn_of(self, obj: FakeCard | SentMessage) -> int | None:
        chat = obj.space_id.rpartition(".")[2] if isinstance(obj, FakeCard) else obj.chat
        if not chat.startswith("cidBench"):
            return None
        try:
            return int(chat.removeprefix("cidBench").removesuffix("=="))
        except ValueError:
            return None

    def _on_change(self, obj: FakeCard | SentMessage, change: str, at: float) -> None:
        turn = self._turn_of(obj)
        if turn is None or turn >= len(self.watches):
            return
        if id(obj) not in self._keys:
            number = next(self._order)
            self._keys[id(obj)] = (obj.out_track_id if isinstance(obj, FakeCard) else f"message-{number}", float(number))
        key, order = self._keys[id(obj)]
        if isinstance(obj, FakeCard):
            view = View(key, order, obj.content, not obj.finalized)
        else:
            view = View(key, order, obj.text, False)
        watch = self.watches[turn]
        was_done = watch.done
        watch.update(view, key, at)
        self._after_update(watch, was_done)

    def live_left(self) -> dict[str, Any]:
        """Cards that were delivered but never finalized."""
        live = [c for c in self.fake.cards.values() if c.delivered and not c.finalized]
        return {"count": len(live), "examples": [f"{c.out_track_id}: {c.content[:60]!r}" for c in live[:5]]}

    def counts(self) -> dict[str, dict[str, int]]:
        """Per API, under the report's names."""
        return {METHOD_NAMES.get(path, path): counts for path, counts in self.fake.call_counts().items()}

    def timeline(self, since: float) -> dict[str, dict[str, list[int]]]:
        """Per card API per second."""
        calls = ((METHOD_NAMES[f"{c.method} {c.path}"], c.at, c.status in (403, 429)) for c in self.fake.calls if c.path in CARD_PATHS)
        return per_second(calls, since)

    async def stop(self) -> None:
        """Close the websocket and the server."""
        await self.fake.stop()
