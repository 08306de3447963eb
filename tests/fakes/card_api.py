"""A fake card platform over HTTP on loopback, and a ``CardSink`` that talks to it.

:class:`FakeCardAPI` behaves like a chat platform's card API where it matters
for the card pipeline:

- ``POST /cards`` creates a card, ``PUT /cards/{id}`` replaces its content,
  ``POST /cards/{id}/finalize`` ends it, ``POST /messages`` posts a plain message
  (the fallback). Every body is ``{"target": …, "snapshot": …, "text": …}``.
- A token bucket per API (``rate_per_s``/``burst``; ``create``, ``update`` —
  shared by update and finalize, as DingTalk's streaming PUT is one API — and
  ``message``) answers **429 with Retry-After** (seconds, decimal) when exceeded.
- Configurable latency (``latency_s`` plus uniform ``jitter_s``) per request.
- Scriptable failures: ``api.fail("finalize", 429, times=3, retry_after=0.1)``,
  ``api.fail("update", 500)``, ``api.expire(card_id)`` (later calls get 404),
  ``max_text`` (longer bodies get 413).
- ``api.hold("update")`` returns a :class:`Gate`: matching requests wait (after
  being recorded) until ``gate.release()`` — a slow call in flight, on demand.
- Every call is recorded (:class:`CallRecord`: op, card id, arrival and answer
  times, HTTP status, parsed body); ``await api.wait_for(predicate)`` waits for
  a condition on the recorded calls instead of sleeping.

:class:`HttpCardSink` implements :class:`adapters.base.CardSink` against it with
aiohttp, mapping statuses to the typed sink errors (429 / 403 QpsLimit →
``RateLimited``, 404/410 → ``CardGone``, 413 → ``TooLong``, 5xx and
connection errors → ``TransientError``, other 4xx → ``PermanentError``).

Usage::

    async with FakeCardAPI(rate_per_s=20, burst=20, latency_s=0.03) as api:
        async with HttpCardSink(api.base_url, rate=RateLimit(18, 4)) as sink:
            ...
        assert api.rate_limited == 0
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
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
from botgateway.card import CardSnapshot, Narration
from botgateway.render import render_markdown

BUCKET_OF_OP: Mapping[str, str] = {"create": "create", "update": "update", "finalize": "update", "fallback": "message"}
"""Which rate bucket each op draws from, at the fake and in :class:`HttpCardSink` alike."""


@dataclass
class CallRecord:
    """One request the fake received."""

    op: str
    """``create``, ``update``, ``finalize`` or ``fallback``."""
    card_id: str | None
    """The card addressed (the new id for a successful create; None for fallback)."""
    arrived_at: float
    """``time.monotonic()`` when the request arrived."""
    body: dict[str, Any]
    """The parsed JSON body (``target``, ``snapshot``, ``text``)."""
    status: int | None = None
    """HTTP status answered; None while the request is still being handled (held or slow)."""
    answered_at: float | None = None
    """``time.monotonic()`` when the answer was sent."""
    reason: str = ""
    """Why the call failed: ``rate_limit``, ``scripted``, ``gone``, ``too_long``; empty on success."""

    @property
    def answer(self) -> str:
        """The snapshot's answer text carried by the call."""
        return str(self.body.get("snapshot", {}).get("answer", ""))

    @property
    def text(self) -> str:
        """The rendered text carried by the call."""
        return str(self.body.get("text", ""))

    @property
    def ok(self) -> bool:
        """Answered 2xx."""
        return self.status is not None and 200 <= self.status < 300


@dataclass
class FakeCard:
    """A card as the fake platform shows it."""

    card_id: str
    """The fake's id of the card."""
    target: dict[str, Any]
    """The target it was created for."""
    snapshot: dict[str, Any]
    """The latest accepted snapshot."""
    text: str
    """The latest accepted rendered text."""
    finalized: bool = False
    """True once finalized; later updates are refused with 404 like an ended stream."""
    expired: bool = False
    """Set by :meth:`FakeCardAPI.expire`: the card is gone (404)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every accepted snapshot, in order."""

    @property
    def answer(self) -> str:
        """The answer the card shows now."""
        return str(self.snapshot.get("answer", ""))

    @property
    def part(self) -> int:
        """The card's part number."""
        return int(self.snapshot.get("part", 1))


@dataclass
class _Failure:
    status: int
    times: int
    retry_after: float | None
    body: dict[str, Any]
    when: Callable[[dict[str, Any]], bool] | None


class Gate:
    """Holds matching requests until :meth:`release`; :attr:`arrived` is set when one is waiting."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self.arrived = asyncio.Event()
        """Set when a request reached the gate."""
        self.held = 0
        """How many requests reached the gate."""

    def release(self) -> None:
        """Let every held (and later) request through."""
        self._open.set()

    async def _pass(self) -> None:
        self.held += 1
        self.arrived.set()
        await self._open.wait()


class _Bucket:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until one is available."""
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class FakeCardAPI:
    """The fake card platform (see the module docstring). Start with ``async with`` or :meth:`start`."""

    def __init__(
        self,
        *,
        rate_per_s: float | None = None,
        burst: int | None = None,
        rates: Mapping[str, tuple[float, int]] | None = None,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        max_text: int | None = None,
    ) -> None:
        """``rate_per_s``/``burst`` apply to every bucket (``create``, ``update``, ``message``);
        ``rates`` overrides per bucket. No rate limit when both are None."""
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.max_text = max_text
        self._buckets: dict[str, _Bucket] = {}
        for name in set(BUCKET_OF_OP.values()):
            if rates and name in rates:
                rate, size = rates[name]
                self._buckets[name] = _Bucket(rate, size)
            elif rate_per_s is not None:
                self._buckets[name] = _Bucket(rate_per_s, burst if burst is not None else max(int(rate_per_s), 1))
        self.calls: list[CallRecord] = []
        """Every request, in arrival order."""
        self.cards: dict[str, FakeCard] = {}
        """Cards by id."""
        self.messages: list[dict[str, Any]] = []
        """Fallback messages (bodies), in order."""
        self._failures: dict[str, list[_Failure]] = {}
        self._gates: dict[str, Gate] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        """``http://127.0.0.1:PORT`` once started."""

    # --- lifecycle ------------------------------------------------------------

    async def start(self) -> str:
        """Listen on an ephemeral loopback port; returns the base URL."""
        app = web.Application()
        app.router.add_post("/cards", self._create)
        app.router.add_put("/cards/{card_id}", self._update)
        app.router.add_post("/cards/{card_id}/finalize", self._finalize)
        app.router.add_post("/messages", self._message)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Stop listening; held requests are released so they can answer."""
        for gate in self._gates.values():
            gate.release()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeCardAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- scripting ----------------------------------------------------------------

    def fail(
        self,
        op: str,
        status: int = 429,
        *,
        times: int = 1,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Answer the next ``times`` requests of ``op`` (matching ``when(body)``) with ``status``.

        429 answers carry ``Retry-After: retry_after`` when given. Scripts queue up in order.
        """
        default = {"code": "rate_limited" if status == 429 else "scripted_failure"}
        self._failures.setdefault(op, []).append(_Failure(status, times, retry_after, body or default, when))

    def hold(self, op: str) -> Gate:
        """Hold every request of ``op`` from now on until the returned gate is released."""
        gate = Gate()
        self._gates[op] = gate
        return gate

    def expire(self, card_id: str) -> None:
        """The card disappears: later updates and finalizes get 404."""
        self.cards[card_id].expired = True

    # --- observation ----------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[FakeCardAPI], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate(self)`` holds (checked after every request event); TimeoutError otherwise."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self)), timeout)

    def calls_of(self, op: str, *, card_id: str | None = None) -> list[CallRecord]:
        """Recorded calls of ``op`` (for ``card_id`` when given)."""
        return [c for c in self.calls if c.op == op and (card_id is None or c.card_id == card_id)]

    @property
    def rate_limited(self) -> int:
        """Calls refused by the rate limiter (not scripted failures)."""
        return sum(1 for c in self.calls if c.reason == "rate_limit")

    def max_in_window(self, window_s: float = 1.0, *, bucket: str | None = None) -> int:
        """The most accepted (non-429) calls whose arrival falls in any ``window_s`` sliding window."""
        times = sorted(
            c.arrived_at for c in self.calls
            if c.status != 429 and (bucket is None or BUCKET_OF_OP[c.op] == bucket)
        )
        best = 0
        start = 0
        for end, at in enumerate(times):
            while at - times[start] >= window_s:
                start += 1
            best = max(best, end - start + 1)
        return best

    def cards_for(self, turn_id: str) -> list[FakeCard]:
        """The cards of one turn (by ``target.turn_id``), in part order."""
        found = [c for c in self.cards.values() if c.target.get("turn_id") == turn_id]
        return sorted(found, key=lambda c: c.part)

    def delivered_answer(self, turn_id: str) -> str:
        """The whole answer the user can read for ``turn_id``: finalized cards and fallback messages, in part order.

        Pieces of one part keep the order they arrived in (a fallback may split a part into several messages).
        """
        pieces: list[tuple[int, int, str]] = []
        for card in self.cards_for(turn_id):
            if card.finalized:
                first = next(i for i, c in enumerate(self.calls) if c.card_id == card.card_id)
                pieces.append((card.part, first, card.answer))
        for message in self.messages:
            if message["target"].get("turn_id") == turn_id:
                index = next(i for i, c in enumerate(self.calls) if c.body is message)
                pieces.append((int(message["snapshot"].get("part", 1)), index, str(message["snapshot"].get("answer", ""))))
        return "".join(text for _, _, text in sorted(pieces))

    # --- handlers ---------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, request: web.Request, op: str, card_id: str | None) -> tuple[CallRecord, web.Response | None]:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        record = CallRecord(op=op, card_id=card_id, arrived_at=time.monotonic(), body=body)
        self.calls.append(record)
        await self._notify()
        bucket = self._buckets.get(BUCKET_OF_OP[op])
        if bucket is not None:
            wait = bucket.take()
            if wait > 0:
                return record, await self._answer(record, 429, {"code": "rate_limited", "retry_after": wait},
                                                  retry_after=wait, reason="rate_limit")
        for failure in self._failures.get(op, []):
            if failure.times > 0 and (failure.when is None or failure.when(body)):
                failure.times -= 1
                return record, await self._answer(record, failure.status, failure.body,
                                                  retry_after=failure.retry_after, reason="scripted")
        gate = self._gates.get(op)
        if gate is not None:
            await gate._pass()
        delay = self.latency_s + (random.uniform(0, self.jitter_s) if self.jitter_s else 0.0)
        if delay > 0:
            await asyncio.sleep(delay)  # simulated platform latency
        if self.max_text is not None and len(str(body.get("text", ""))) > self.max_text:
            return record, await self._answer(record, 413, {"code": "too_long"}, reason="too_long")
        return record, None

    async def _answer(
        self, record: CallRecord, status: int, payload: dict[str, Any], *, retry_after: float | None = None, reason: str = ""
    ) -> web.Response:
        headers = {}
        if retry_after is not None:
            headers["Retry-After"] = f"{retry_after:.3f}"
        record.status = status
        record.reason = reason
        record.answered_at = time.monotonic()
        await self._notify()
        return web.json_response(payload, status=status, headers=headers)

    def _live_card(self, card_id: str) -> FakeCard | None:
        card = self.cards.get(card_id)
        if card is None or card.expired or card.finalized:
            return None
        return card

    async def _create(self, request: web.Request) -> web.Response:
        record, refused = await self._handle(request, "create", None)
        if refused is not None:
            return refused
        card_id = f"card-{next(self._ids)}"
        record.card_id = card_id
        snapshot = record.body.get("snapshot", {})
        self.cards[card_id] = FakeCard(card_id, dict(record.body.get("target", {})), snapshot, record.text, history=[snapshot])
        return await self._answer(record, 200, {"ok": True, "card_id": card_id})

    async def _update(self, request: web.Request) -> web.Response:
        card_id = request.match_info["card_id"]
        record, refused = await self._handle(request, "update", card_id)
        if refused is not None:
            return refused
        card = self._live_card(card_id)
        if card is None:
            return await self._answer(record, 404, {"code": "card_not_found"}, reason="gone")
        card.snapshot = record.body.get("snapshot", {})
        card.text = record.text
        card.history.append(card.snapshot)
        return await self._answer(record, 200, {"ok": True})

    async def _finalize(self, request: web.Request) -> web.Response:
        card_id = request.match_info["card_id"]
        record, refused = await self._handle(request, "finalize", card_id)
        if refused is not None:
            return refused
        card = self._live_card(card_id)
        if card is None:
            return await self._answer(record, 404, {"code": "card_not_found"}, reason="gone")
        card.snapshot = record.body.get("snapshot", {})
        card.text = record.text
        card.history.append(card.snapshot)
        card.finalized = True
        return await self._answer(record, 200, {"ok": True})

    async def _message(self, request: web.Request) -> web.Response:
        record, refused = await self._handle(request, "fallback", None)
        if refused is not None:
            return refused
        self.messages.append(record.body)
        return await self._answer(record, 200, {"ok": True, "message_id": f"msg-{len(self.messages)}"})


# --- the sink ---------------------------------------------------------------------


def snapshot_to_dict(snapshot: CardSnapshot) -> dict[str, Any]:
    """A JSON-ready snapshot; each block carries ``type`` (``narration`` or ``tool``)."""
    data = asdict(snapshot)
    data["blocks"] = [
        {"type": "narration" if isinstance(b, Narration) else "tool", **asdict(b)} for b in snapshot.blocks
    ]
    return data


def target_to_dict(target: CardTarget) -> dict[str, Any]:
    """A JSON-ready target."""
    data = {f.name: getattr(target, f.name) for f in fields(target)}
    data["extra"] = dict(target.extra)
    return data


DEFAULT_SINK_RATE = RateLimit(rate_per_s=18.0, burst=4)
"""What :class:`HttpCardSink` declares by default: 90 % of a 20 QPS platform, small bursts."""


class HttpCardSink:
    """A :class:`adapters.base.CardSink` for :class:`FakeCardAPI` over aiohttp.

    ``rate`` (or ``rates`` per bucket) is the budget the sink declares to the
    streamer; keep it below the fake's limit, as a real adapter keeps headroom
    under a platform's published quota.
    """

    platform = "fake"

    def __init__(
        self,
        base_url: str,
        *,
        max_chars: int = 3000,
        rate: RateLimit = DEFAULT_SINK_RATE,
        rates: Mapping[str, RateLimit] | None = None,
        app_key: str = "fake-app",
        render: Callable[[CardSnapshot], str] = render_markdown,
        timeout_s: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_chars = max_chars
        self._rate = rate
        self._rates = dict(rates or {})
        self._app_key = app_key
        self._render = render
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> HttpCardSink:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if the sink created it."""
        if self._session is not None and self._own_session:
            await self._session.close()
            self._session = None

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One bucket per app and API, as the fake limits them."""
        bucket = BUCKET_OF_OP[op]
        return f"{self.platform}:{self._app_key}:{bucket}", self._rates.get(bucket, self._rate)

    def _body(self, target: CardTarget, snapshot: CardSnapshot) -> dict[str, Any]:
        return {"target": target_to_dict(target), "snapshot": snapshot_to_dict(snapshot), "text": self._render(snapshot)}

    async def _request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._own_session = True
        try:
            async with self._session.request(method, self.base_url + path, json=body, timeout=self._timeout) as resp:
                try:
                    payload = await resp.json(content_type=None)
                except ValueError:
                    payload = {}
                payload = payload if isinstance(payload, dict) else {}
                status = resp.status
                retry_header = resp.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(f"card API unreachable: {type(exc).__name__}") from None
        if 200 <= status < 300:
            return payload
        code = str(payload.get("code", ""))
        if status == 429 or (status == 403 and "qpslimit" in code.lower()):
            retry_after = _seconds(retry_header) if retry_header else _seconds(payload.get("retry_after"))
            raise RateLimited(retry_after, f"card API throttled ({status})")
        if status in (404, 410):
            raise CardGone(f"card not found ({status})")
        if status == 413:
            raise TooLong(f"card too long ({status})")
        if status >= 500:
            raise TransientError(f"card API error {status}")
        raise PermanentError(f"card API refused the call ({status} {code})")

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """``POST /cards``."""
        payload = await self._request("POST", "/cards", self._body(target, snapshot))
        return CardHandle(card_id=str(payload["card_id"]), target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``PUT /cards/{id}``."""
        await self._request("PUT", f"/cards/{handle.card_id}", self._body(handle.target, snapshot))
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """``POST /cards/{id}/finalize``."""
        await self._request("POST", f"/cards/{handle.card_id}/finalize", self._body(handle.target, snapshot))
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """``POST /messages``."""
        await self._request("POST", "/messages", self._body(target, replace(snapshot)))


def _seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
