"""A generic chat-card API on loopback, rate limited like DingTalk, and the sink that talks to it.

:class:`FakeCardApi` is a real aiohttp server on ``127.0.0.1`` (ephemeral port)
that behaves like a platform card API under load:

- every call waits a latency drawn uniformly from a range (the platform's
  processing time plus the network), throttle answers included;
- one token bucket for the whole app (``qps`` per second, ``burst`` back to
  back) is checked when a call *arrives*; a call past it gets HTTP 429
  ``{"code": "QpsLimit"}`` with ``Retry-After: 1`` and changes nothing;
- an accepted call becomes visible when its latency has passed, and the
  server records that moment, so the benchmark can tell when each character
  of an answer first reached the user.

Endpoints: ``POST /v1/cards`` (create), ``PUT /v1/cards/{id}`` (update; with
``"final": true`` it finalizes), ``POST /v1/messages`` (a plain message: the
fallback, and the whole reply of the no-streaming strategy).

:class:`HttpCardSink` is a :class:`adapters.base.CardSink` for that API. It
sends what a platform sink would (the card rendered to Markdown) plus, for the
benchmark's bookkeeping, the raw answer text and status, and maps HTTP answers
to the typed sink errors the streamer understands. Tests may import both; this
module has no test-framework dependency.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from adapters.base import (
    CardGone,
    CardHandle,
    CardOp,
    CardTarget,
    PermanentError,
    RateLimit,
    RateLimited,
    TooLong,
    TransientError,
)
from botgateway.card import CardSnapshot
from botgateway.render import render_markdown

__all__ = ["ApiCall", "CardRecord", "FakeCardApi", "HttpCardSink", "MessageRecord"]


@dataclass(frozen=True)
class ApiCall:
    """One request the fake received."""

    op: str
    """``create``, ``update``, ``finalize`` or ``message``."""
    turn_id: str
    """The turn the call belongs to (sent by the sink)."""
    card_id: str
    """The card's id (empty for messages and failed creates)."""
    arrived_at: float
    """``time.monotonic()`` when the request arrived."""
    status: int
    """HTTP status answered."""
    visible_at: float | None
    """``time.monotonic()`` when the new content became visible; ``None`` when rejected."""
    answer_len: int
    """Characters of answer text the call carried."""
    has_output: bool
    """The content shows something the model produced (tool line, thought or answer text)."""


@dataclass
class CardRecord:
    """What the fake knows about one card (mutable; owned by the server)."""

    card_id: str
    """The id the fake gave the card."""
    turn_id: str
    """The turn it shows."""
    part: int
    """1, or 2, 3… for continuation cards."""
    answer: str = ""
    """The answer text the card shows now."""
    content: str = ""
    """The rendered content the card shows now."""
    status: str = ""
    """The card's status as last sent."""
    seq: int = -1
    """Highest snapshot version seen."""
    finalized_at: float | None = None
    """When the card was finalized (``None`` while streaming)."""
    updates: int = 0
    """Accepted calls on this card, creation included."""
    writes_after_final: int = 0
    """Accepted updates that arrived after the card was finalized (a streamer bug)."""
    seq_regressions: int = 0
    """Accepted calls carrying an older ``seq`` than the card already showed (out-of-order delivery)."""


@dataclass(frozen=True)
class MessageRecord:
    """A plain message the fake accepted."""

    turn_id: str
    """The turn it belongs to."""
    answer: str
    """The answer text it carried."""
    status: str
    """The snapshot status it was rendered from."""
    visible_at: float
    """When it became visible."""


class _Bucket:
    """The server-side rate limit: a token bucket checked on arrival."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = float(max(burst, 1))
        self.tokens = self.burst
        self.clock = clock
        self.updated = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class FakeCardApi:
    """A rate-limited card API on loopback that records when each content change became visible."""

    def __init__(
        self,
        *,
        qps: float = 20.0,
        burst: int | None = None,
        latency_ms: tuple[float, float] = (30.0, 80.0),
        max_content_chars: int = 8000,
        seed: int = 0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.qps = qps
        """Accepted calls per second for the whole app."""
        self.latency_ms = latency_ms
        """Latency range of every answer."""
        self.max_content_chars = max_content_chars
        """Content longer than this is refused with 413."""
        self._bucket = _Bucket(qps, burst if burst is not None else max(1, round(qps)), clock)
        self._clock = clock
        self._random = random.Random(seed)
        self._host = host
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        """``http://127.0.0.1:PORT`` once started."""
        self.calls: list[ApiCall] = []
        """Every request, in arrival order."""
        self.cards: dict[str, CardRecord] = {}
        """Every created card by id."""
        self.messages: list[MessageRecord] = []
        """Every accepted plain message."""

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> str:
        """Start listening; returns the base URL."""
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/v1/cards", self._create)
        app.router.add_put("/v1/cards/{card_id}", self._update)
        app.router.add_post("/v1/messages", self._message)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0, backlog=2048)
        await site.start()
        server = site._server  # aiohttp exposes the bound socket only here
        port = server.sockets[0].getsockname()[1] if server and server.sockets else 0
        self.base_url = f"http://{self._host}:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeCardApi:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- reading --------------------------------------------------------------------

    @property
    def throttled(self) -> int:
        """How many calls were answered 429."""
        return sum(1 for call in self.calls if call.status == 429)

    def cards_of(self, turn_id: str) -> list[CardRecord]:
        """The turn's cards, first part first."""
        return sorted((c for c in self.cards.values() if c.turn_id == turn_id), key=lambda c: c.part)

    def card_answer(self, turn_id: str) -> str:
        """The answer the turn's cards show now, parts joined in order."""
        return "".join(card.answer for card in self.cards_of(turn_id))

    # --- handlers -------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "InvalidBody", "request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            return _error(400, "InvalidBody", "body must be an object with a string 'content'")
        if len(body["content"]) > self.max_content_chars:
            return _error(413, "ContentTooLong", f"content is longer than {self.max_content_chars} characters")
        return body

    async def _admit(self, op: str, turn_id: str, card_id: str, arrived: float, body: dict[str, Any]) -> web.Response | None:
        """Apply the rate limit and the latency; a response when the call is refused."""
        admitted = self._bucket.take()
        await asyncio.sleep(self._random.uniform(*self.latency_ms) / 1000.0)
        if admitted:
            return None
        self._record(op, turn_id, card_id, arrived, 429, None, body)
        return web.json_response(
            {"code": "QpsLimit", "message": f"the app exceeded {self.qps:g} calls per second"},
            status=429,
            headers={"Retry-After": "1"},
        )

    def _record(self, op: str, turn_id: str, card_id: str, arrived: float, status: int, visible: float | None, body: dict[str, Any]) -> None:
        self.calls.append(
            ApiCall(
                op=op,
                turn_id=turn_id,
                card_id=card_id,
                arrived_at=arrived,
                status=status,
                visible_at=visible,
                answer_len=len(str(body.get("answer") or "")),
                has_output=bool(body.get("has_output")),
            )
        )

    async def _create(self, request: web.Request) -> web.Response:
        arrived = self._clock()
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        turn_id = str(body.get("turn_id") or "")
        refused = await self._admit("create", turn_id, "", arrived, body)
        if refused is not None:
            return refused
        card_id = f"card-{next(self._ids)}"
        card = CardRecord(card_id=card_id, turn_id=turn_id, part=int(body.get("part") or 1))
        self.cards[card_id] = card
        visible = self._apply(card, body, final=bool(body.get("final")))
        self._record("create", turn_id, card_id, arrived, 200, visible, body)
        return web.json_response({"card_id": card_id})

    async def _update(self, request: web.Request) -> web.Response:
        arrived = self._clock()
        card_id = request.match_info["card_id"]
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        final = bool(body.get("final"))
        op = "finalize" if final else "update"
        card = self.cards.get(card_id)
        turn_id = card.turn_id if card else str(body.get("turn_id") or "")
        refused = await self._admit(op, turn_id, card_id, arrived, body)
        if refused is not None:
            return refused
        if card is None:
            self._record(op, turn_id, card_id, arrived, 404, None, body)
            return _error(404, "CardNotFound", f"no card {card_id}")
        visible = self._apply(card, body, final=final)
        self._record(op, turn_id, card_id, arrived, 200, visible, body)
        return web.json_response({"ok": True})

    async def _message(self, request: web.Request) -> web.Response:
        arrived = self._clock()
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        turn_id = str(body.get("turn_id") or "")
        refused = await self._admit("message", turn_id, "", arrived, body)
        if refused is not None:
            return refused
        visible = self._clock()
        self.messages.append(MessageRecord(turn_id, str(body.get("answer") or ""), str(body.get("status") or ""), visible))
        self._record("message", turn_id, "", arrived, 200, visible, body)
        return web.json_response({"message_id": f"msg-{next(self._ids)}"})

    def _apply(self, card: CardRecord, body: dict[str, Any], *, final: bool) -> float:
        seq = int(body.get("seq") or 0)
        if card.finalized_at is not None:
            card.writes_after_final += 1
        if seq < card.seq:
            card.seq_regressions += 1
        card.seq = max(card.seq, seq)
        card.answer = str(body.get("answer") or "")
        card.content = body["content"]
        card.status = str(body.get("status") or "")
        card.updates += 1
        now = self._clock()
        if final and card.finalized_at is None:
            card.finalized_at = now
        return now


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


# --- the sink ---------------------------------------------------------------------------


@dataclass
class HttpCardSink:
    """A :class:`~adapters.base.CardSink` for :class:`FakeCardApi`, over one shared aiohttp session.

    Every operation draws from one budget for the whole app, as DingTalk's card
    API does: ``rate_key`` returns the same key and limit for every call.
    """

    base_url: str
    """The fake's base URL."""
    session: aiohttp.ClientSession
    """Shared HTTP session (the caller owns and closes it)."""
    rate_limit: RateLimit
    """The app's declared budget."""
    max_chars: int = 3000
    """Answer characters per card before a continuation card (DingTalk's default)."""
    platform: str = "benchcard"
    """Adapter name."""
    app_key: str = "bench-app"
    """Scope of the shared budget."""
    timeout_s: float = 10.0
    """Per-call timeout."""
    calls: int = field(default=0, init=False)
    """Calls made (for the worker's own accounting)."""

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One bucket per app for every card call."""
        return f"{self.platform}:{target.workspace_id or self.app_key}:card", self.rate_limit

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """``POST /v1/cards``."""
        data = await self._call("POST", "/v1/cards", self._body(target, snapshot, final=False), "create")
        card_id = data.get("card_id") if isinstance(data, dict) else None
        if not card_id:
            raise TransientError("card API: create answered without a card_id")
        return CardHandle(card_id=str(card_id), target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``PUT /v1/cards/{id}``."""
        await self._call("PUT", f"/v1/cards/{handle.card_id}", self._body(handle.target, snapshot, final=False), "update")
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``PUT /v1/cards/{id}`` with ``final: true``."""
        await self._call("PUT", f"/v1/cards/{handle.card_id}", self._body(handle.target, snapshot, final=True), "finalize")
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """``POST /v1/messages``: the snapshot as a plain message."""
        await self._call("POST", "/v1/messages", self._body(target, snapshot, final=True), "message")

    @staticmethod
    def _body(target: CardTarget, snapshot: CardSnapshot, *, final: bool) -> dict[str, Any]:
        return {
            "turn_id": target.turn_id,
            "chat_id": target.chat_id,
            "part": snapshot.part,
            "seq": snapshot.seq,
            "status": snapshot.status,
            "final": final,
            "content": render_markdown(snapshot),
            # Bookkeeping for the benchmark; a platform gets only ``content``.
            "answer": snapshot.answer,
            "has_output": bool(snapshot.blocks or snapshot.thought or snapshot.answer),
        }

    async def _call(self, method: str, path: str, body: dict[str, Any], what: str) -> Any:
        self.calls += 1
        try:
            async with self.session.request(
                method,
                f"{self.base_url}{path}",
                json=body,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as resp:
                status = resp.status
                text = await resp.text()
                retry_after = resp.headers.get("Retry-After")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TransientError(f"card API {what}: {type(exc).__name__}") from None
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError:
            payload = {"message": text[:200]}
        code = str(payload.get("code", "")) if isinstance(payload, dict) else ""
        if status == 429 or (status == 403 and "QpsLimit" in code):
            try:
                wait = float(retry_after) if retry_after else None
            except ValueError:
                wait = None
            raise RateLimited(wait, f"card API throttled {what} ({code or status})")
        if status >= 500:
            raise TransientError(f"card API {what}: HTTP {status}")
        if status == 404:
            raise CardGone(f"card API {what}: {code or 'not found'}")
        if status == 413:
            raise TooLong(f"card API {what}: content too long")
        if status >= 400:
            raise PermanentError(f"card API {what}: HTTP {status} {code}".rstrip())
        return payload
