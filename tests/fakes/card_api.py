"""A fake chat-card platform over HTTP on loopback, and the ``CardSink`` that talks to it.

One fake serves the streaming tests and the benchmark. :class:`FakeCardAPI`
behaves like a platform's card API where it matters to the card pipeline:

- ``POST /cards`` creates a card, ``PUT /cards/{id}`` replaces its content,
  ``POST /cards/{id}/finalize`` ends it (later writes get 404, like an ended
  stream), ``POST /messages`` posts a plain message (the fallback). Every body
  is ``{"target": …, "snapshot": …, "text": …}``; ``text`` is what a platform
  renders, longer than ``max_text`` gets 413.
- Rate limits are token buckets checked when a call *arrives*: one per API
  (``create``, ``update`` — shared by update and finalize, as DingTalk's
  streaming PUT is one API — and ``message``), or with ``one_bucket=True`` one
  for the whole app, as DingTalk's card API counts. A call past the bucket
  gets **429** ``{"code": "QpsLimit"}`` with ``Retry-After`` (decimal seconds:
  the time until a token, or the fixed ``retry_after_s``) and changes nothing.
- Latency: ``latency_s`` plus uniform ``jitter_s`` (seeded), on every answer,
  throttles included. An accepted call becomes visible when its latency has
  passed; the fake records that moment (``visible_at``), so the benchmark can
  tell when each character first reached the user.
- Scripted failures: ``api.fail("finalize", 429, times=3, retry_after=0.1)``,
  ``api.fail("update", 500)``, ``api.clear_failures()``; ``api.expire(card_id)``
  (later calls get 404); ``api.hold("update")`` returns a :class:`Gate` that
  holds matching requests (after recording them) until released.
- Every call is recorded (:class:`CallRecord`), with its body unless
  ``keep_bodies=False`` (the benchmark's thousands of calls); ``await
  api.wait_for(predicate)`` waits for a condition instead of sleeping.

:class:`HttpCardSink` implements :class:`adapters.base.CardSink` against it
with aiohttp, mapping statuses to the typed sink errors (429 / 403 QpsLimit →
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
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from botgateway.budget import RateLimit
from botgateway.cards.render import render_markdown
from botgateway.sink import (
    CardGone,
    CardHandle,
    CardOp,
    CardTarget,
    PermanentError,
    RateLimited,
    TooLong,
    TransientError,
    parse_retry_after,
    target_to_dict,
)
from botgateway.snapshot import CardSnapshot, Narration

__all__ = [
    "BUCKET_OF_OP",
    "CallRecord",
    "FakeCard",
    "FakeCardAPI",
    "FakeMessage",
    "Gate",
    "HttpCardSink",
    "snapshot_to_dict",
    "target_to_dict",
]

BUCKET_OF_OP: Mapping[str, str] = {"create": "create", "update": "update", "finalize": "update", "fallback": "message"}
"""Which rate bucket each op draws from (per-API mode), at the fake and in :class:`HttpCardSink` alike."""

APP_BUCKET = "app"
"""The one bucket of ``one_bucket`` mode."""


def _has_output(snapshot: Mapping[str, Any]) -> bool:
    return bool(snapshot.get("blocks") or snapshot.get("thought") or snapshot.get("answer"))


class _ShowsSnapshot:
    """Readers of a rendered snapshot's fields (for cards and messages)."""

    target: dict[str, Any]
    snapshot: dict[str, Any]

    @property
    def turn_id(self) -> str:
        """The turn it belongs to (``target.turn_id``)."""
        return str(self.target.get("turn_id", ""))

    @property
    def answer(self) -> str:
        """The answer text it shows."""
        return str(self.snapshot.get("answer", ""))

    @property
    def status(self) -> str:
        """The snapshot's status (``streaming``, ``done``…)."""
        return str(self.snapshot.get("status", ""))

    @property
    def seq(self) -> int:
        """The version of the snapshot."""
        return int(self.snapshot.get("seq", 0) or 0)

    @property
    def part(self) -> int:
        """The part of the answer (1, or 2, 3… for continuations)."""
        return int(self.snapshot.get("part", 1) or 1)


@dataclass
class CallRecord:
    """One request the fake received."""

    op: str
    """``create``, ``update``, ``finalize`` or ``fallback``."""
    card_id: str | None
    """The card addressed (the new id for a successful create; None for fallback and refused creates)."""
    arrived_at: float
    """Clock time when the request arrived."""
    turn_id: str = ""
    """The turn the call belongs to (``target.turn_id``)."""
    answer_len: int = 0
    """Characters of answer text the call carried."""
    has_output: bool = False
    """The content shows something the model produced (a tool line, thought or answer text)."""
    body: dict[str, Any] = field(default_factory=dict)
    """The parsed JSON body (``target``, ``snapshot``, ``text``); empty when the fake keeps no bodies."""
    status: int | None = None
    """HTTP status answered; None while the request is still being handled (held or slow)."""
    answered_at: float | None = None
    """Clock time when the answer was sent."""
    reason: str = ""
    """Why the call failed: ``rate_limit``, ``scripted``, ``gone``, ``too_long``, ``invalid``; empty on success."""
    index: int = -1
    """Position in :attr:`FakeCardAPI.calls` (arrival order)."""

    @property
    def answer(self) -> str:
        """The snapshot's answer text carried by the call (needs bodies)."""
        return str(self.body.get("snapshot", {}).get("answer", ""))

    @property
    def text(self) -> str:
        """The rendered text carried by the call (needs bodies)."""
        return str(self.body.get("text", ""))

    @property
    def ok(self) -> bool:
        """Answered 2xx."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def visible_at(self) -> float | None:
        """When the call's content became visible to users; None unless it was accepted."""
        return self.answered_at if self.ok else None


@dataclass
class FakeCard(_ShowsSnapshot):
    """A card as the fake platform shows it (mutable; owned by the fake)."""

    card_id: str
    """The fake's id of the card."""
    target: dict[str, Any]
    """The target it was created for."""
    snapshot: dict[str, Any]
    """The latest accepted snapshot."""
    text: str
    """The latest accepted rendered text."""
    finalized_at: float | None = None
    """When the card was finalized; None while it streams. Later writes get 404."""
    expired: bool = False
    """Set by :meth:`FakeCardAPI.expire`: the card is gone (404)."""
    updates: int = 0
    """Accepted calls on this card, creation included."""
    writes_after_final: int = 0
    """Writes that arrived after the card was finalized (refused with 404; a streamer bug unless late)."""
    seq_regressions: int = 0
    """Accepted calls carrying an older ``seq`` than the card already showed (out-of-order delivery)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every accepted snapshot, in order (only when the fake keeps bodies)."""

    @property
    def finalized(self) -> bool:
        """True once finalized."""
        return self.finalized_at is not None


@dataclass(frozen=True)
class FakeMessage(_ShowsSnapshot):
    """A plain (fallback) message the fake accepted."""

    target: dict[str, Any]
    """The target it was posted to."""
    snapshot: dict[str, Any]
    """The snapshot it was rendered from."""
    text: str
    """The rendered text."""
    visible_at: float
    """When it became visible."""
    call_index: int
    """Index of its :class:`CallRecord` in :attr:`FakeCardAPI.calls` (arrival order)."""


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
    """The server-side rate limit: a token bucket checked on arrival."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = max(rate, 1e-9)
        self.burst = float(max(burst, 1))
        self.tokens = self.burst
        self.clock = clock
        self.at = clock()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until one is available."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


def _format_seconds(seconds: float) -> str:
    """``1``, ``0.05``, ``0.123``: decimal seconds as a Retry-After value."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") or "0"


class FakeCardAPI:
    """The fake card platform (see the module docstring). Start with ``async with`` or :meth:`start`."""

    def __init__(
        self,
        *,
        rate_per_s: float | None = None,
        burst: int | None = None,
        rates: Mapping[str, tuple[float, int]] | None = None,
        one_bucket: bool = False,
        retry_after_s: float | None = None,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        max_text: int | None = None,
        keep_bodies: bool = True,
        seed: int | None = None,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``rate_per_s``/``burst`` apply to every bucket (``burst`` defaults to the rate);
        ``rates`` overrides per bucket. No rate limit when both are None.

        ``one_bucket``: one bucket for the whole app instead of one per API.
        ``retry_after_s``: the Retry-After of rate-limit answers (default: the
        exact, decimal time until a token is available). ``keep_bodies=False``
        keeps no request bodies (the per-call numbers are still recorded).
        """
        self.latency_s = latency_s
        """Fixed part of every answer's latency."""
        self.jitter_s = jitter_s
        """Random extra latency, uniform in ``[0, jitter_s]``."""
        self.max_text = max_text
        """Rendered text longer than this is refused with 413."""
        self.retry_after_s = retry_after_s
        self.keep_bodies = keep_bodies
        self._clock = clock
        self._random = random.Random(seed)
        self._host = host
        self._one_bucket = one_bucket
        self._buckets: dict[str, _Bucket] = {}
        names = [APP_BUCKET] if one_bucket else sorted(set(BUCKET_OF_OP.values()))
        for name in names:
            if rates and name in rates:
                rate, size = rates[name]
                self._buckets[name] = _Bucket(rate, size, clock)
            elif rate_per_s is not None:
                self._buckets[name] = _Bucket(rate_per_s, burst if burst is not None else max(round(rate_per_s), 1), clock)
        self.calls: list[CallRecord] = []
        """Every request, in arrival order."""
        self.cards: dict[str, FakeCard] = {}
        """Cards by id."""
        self.messages: list[FakeMessage] = []
        """Fallback messages, in order."""
        self._failures: dict[str, list[_Failure]] = {}
        self._gates: dict[str, Gate] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._waiters = 0
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        """``http://127.0.0.1:PORT`` once started."""

    # --- lifecycle ------------------------------------------------------------

    async def start(self) -> str:
        """Listen on an ephemeral loopback port; returns the base URL."""
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/cards", self._create)
        app.router.add_put("/cards/{card_id}", self._update)
        app.router.add_post("/cards/{card_id}/finalize", self._finalize)
        app.router.add_post("/messages", self._message)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0, backlog=2048)
        await site.start()
        server = site._server  # aiohttp exposes the bound socket only here
        port = server.sockets[0].getsockname()[1] if server and server.sockets else 0  # type: ignore[union-attr]
        self.base_url = f"http://{self._host}:{port}"
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

        Answers carry ``Retry-After: retry_after`` when given. Scripts queue up in order.
        """
        default = {"code": "QpsLimit" if status == 429 else "scripted_failure"}
        self._failures.setdefault(op, []).append(_Failure(status, times, retry_after, body or default, when))

    def clear_failures(self, op: str | None = None) -> None:
        """Forget the scripted failures of ``op`` (of every op when None): the platform recovered."""
        if op is None:
            self._failures.clear()
        else:
            self._failures.pop(op, None)

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
        self._waiters += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self)), timeout)
        finally:
            self._waiters -= 1

    def calls_of(self, op: str, *, card_id: str | None = None) -> list[CallRecord]:
        """Recorded calls of ``op`` (for ``card_id`` when given)."""
        return [c for c in self.calls if c.op == op and (card_id is None or c.card_id == card_id)]

    @property
    def rate_limited(self) -> int:
        """Calls refused by the rate limiter (not scripted failures)."""
        return sum(1 for c in self.calls if c.reason == "rate_limit")

    @property
    def throttled(self) -> int:
        """Calls answered 429, by the rate limiter or by script."""
        return sum(1 for c in self.calls if c.status == 429)

    def max_in_window(self, window_s: float = 1.0, *, bucket: str | None = None) -> int:
        """The most accepted (non-429) calls whose arrival falls in any ``window_s`` sliding window."""
        times = sorted(
            c.arrived_at for c in self.calls
            if c.status != 429 and (bucket is None or self._bucket_name(c.op) == bucket)
        )  # fmt: skip
        best = 0
        start = 0
        for end, at in enumerate(times):
            while at - times[start] >= window_s:
                start += 1
            best = max(best, end - start + 1)
        return best

    def cards_for(self, turn_id: str) -> list[FakeCard]:
        """The cards of one turn (by ``target.turn_id``), in part order."""
        found = [c for c in self.cards.values() if c.turn_id == turn_id]
        return sorted(found, key=lambda c: c.part)

    def messages_for(self, turn_id: str) -> list[FakeMessage]:
        """The fallback messages of one turn, in arrival order."""
        return [m for m in self.messages if m.turn_id == turn_id]

    def card_answer(self, turn_id: str) -> str:
        """The answer the turn's cards show now, parts joined in order."""
        return "".join(card.answer for card in self.cards_for(turn_id))

    def delivered_answer(self, turn_id: str) -> str:
        """The whole answer the user can read for ``turn_id``: finalized cards and fallback messages, in part order.

        Pieces of one part keep the order they arrived in (a fallback may split a part into several messages).
        """
        pieces: list[tuple[int, int, str]] = []
        for card in self.cards_for(turn_id):
            if card.finalized:
                first = next(i for i, c in enumerate(self.calls) if c.card_id == card.card_id)
                pieces.append((card.part, first, card.answer))
        for message in self.messages_for(turn_id):
            pieces.append((message.part, message.call_index, message.answer))
        return "".join(text for _, _, text in sorted(pieces))

    # --- handlers ---------------------------------------------------------------

    def _bucket_name(self, op: str) -> str:
        return APP_BUCKET if self._one_bucket else BUCKET_OF_OP[op]

    async def _notify(self) -> None:
        if self._waiters:
            async with self._changed:
                self._changed.notify_all()

    def _delay(self) -> float:
        return self.latency_s + (self._random.uniform(0, self.jitter_s) if self.jitter_s else 0.0)

    async def _handle(
        self, request: web.Request, op: str, card_id: str | None
    ) -> tuple[CallRecord, dict[str, Any], web.Response | None]:
        """Record the call, then apply the rate limit, scripts, gates, latency and size limit.

        Returns the record, the parsed body and, when the call is refused, the answer to send.
        """
        arrived = self._clock()
        try:
            parsed = await request.json()
        except ValueError:
            parsed = None
        valid = isinstance(parsed, dict) and isinstance(parsed.get("text"), str)
        body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        snapshot = body.get("snapshot") if isinstance(body.get("snapshot"), dict) else {}
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        record = CallRecord(
            op=op,
            card_id=card_id,
            arrived_at=arrived,
            turn_id=str(target.get("turn_id", "")),
            answer_len=len(str(snapshot.get("answer", ""))),
            has_output=_has_output(snapshot),
            body=body if self.keep_bodies else {},
            index=len(self.calls),
        )
        self.calls.append(record)
        await self._notify()
        if not valid:
            payload = {"code": "InvalidBody", "message": "body must be a JSON object with a string 'text'"}
            return record, body, await self._answer(record, 400, payload, reason="invalid")
        bucket = self._buckets.get(self._bucket_name(op))
        wait = bucket.take() if bucket is not None else 0.0
        refusal: tuple[int, dict[str, Any], float | None, str] | None = None
        if wait > 0:
            retry_after = self.retry_after_s if self.retry_after_s is not None else wait
            payload = {"code": "QpsLimit", "message": "the app exceeded its calls per second", "retry_after": retry_after}
            refusal = (429, payload, retry_after, "rate_limit")
        else:
            for failure in self._failures.get(op, []):
                if failure.times > 0 and (failure.when is None or failure.when(body)):
                    failure.times -= 1
                    refusal = (failure.status, failure.body, failure.retry_after, "scripted")
                    break
        if refusal is None:
            gate = self._gates.get(op)
            if gate is not None:
                await gate._pass()
        delay = self._delay()
        if delay > 0:
            await asyncio.sleep(delay)  # simulated platform latency, throttle answers included
        if refusal is not None:
            status, payload, retry_after, reason = refusal
            return record, body, await self._answer(record, status, payload, retry_after=retry_after, reason=reason)
        if self.max_text is not None and len(body["text"]) > self.max_text:
            return record, body, await self._answer(record, 413, {"code": "ContentTooLong"}, reason="too_long")
        return record, body, None

    async def _answer(
        self, record: CallRecord, status: int, payload: dict[str, Any], *, retry_after: float | None = None, reason: str = ""
    ) -> web.Response:
        headers = {}
        if retry_after is not None:
            headers["Retry-After"] = _format_seconds(retry_after)
        record.status = status
        record.reason = reason
        record.answered_at = self._clock()
        await self._notify()
        return web.json_response(payload, status=status, headers=headers)

    def _show(self, card: FakeCard, body: dict[str, Any]) -> None:
        """The card shows ``body`` from now on."""
        snapshot = body.get("snapshot") if isinstance(body.get("snapshot"), dict) else {}
        seq = int(snapshot.get("seq", 0) or 0)
        if card.updates and seq < card.seq:
            card.seq_regressions += 1
        card.snapshot = snapshot
        card.text = str(body.get("text", ""))
        card.updates += 1
        if self.keep_bodies:
            card.history.append(snapshot)

    async def _write(self, request: web.Request, op: str, *, final: bool) -> web.Response:
        card_id = request.match_info["card_id"]
        record, body, refused = await self._handle(request, op, card_id)
        if refused is not None:
            return refused
        card = self.cards.get(card_id)
        if card is not None and card.finalized and not card.expired:
            card.writes_after_final += 1  # an ended stream takes no more writes
        if card is None or card.expired or card.finalized:
            return await self._answer(record, 404, {"code": "CardNotFound", "message": f"no open card {card_id}"}, reason="gone")
        self._show(card, body)
        if final:
            card.finalized_at = self._clock()
        return await self._answer(record, 200, {"ok": True})

    async def _create(self, request: web.Request) -> web.Response:
        record, body, refused = await self._handle(request, "create", None)
        if refused is not None:
            return refused
        card_id = f"card-{next(self._ids)}"
        record.card_id = card_id
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        card = FakeCard(card_id, dict(target), {}, "")
        self.cards[card_id] = card
        self._show(card, body)
        return await self._answer(record, 200, {"ok": True, "card_id": card_id})

    async def _update(self, request: web.Request) -> web.Response:
        return await self._write(request, "update", final=False)

    async def _finalize(self, request: web.Request) -> web.Response:
        return await self._write(request, "finalize", final=True)

    async def _message(self, request: web.Request) -> web.Response:
        record, body, refused = await self._handle(request, "fallback", None)
        if refused is not None:
            return refused
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        snapshot = body.get("snapshot") if isinstance(body.get("snapshot"), dict) else {}
        self.messages.append(FakeMessage(dict(target), snapshot, str(body["text"]), self._clock(), record.index))
        return await self._answer(record, 200, {"ok": True, "message_id": f"msg-{len(self.messages)}"})


# --- the sink ---------------------------------------------------------------------


def snapshot_to_dict(snapshot: CardSnapshot) -> dict[str, Any]:
    """A JSON-ready snapshot; each block carries ``type`` (``narration`` or ``tool``)."""
    data = asdict(snapshot)
    data["blocks"] = [
        {"type": "narration" if isinstance(b, Narration) else "tool", **asdict(b)} for b in snapshot.blocks
    ]
    return data


DEFAULT_SINK_RATE = RateLimit(rate_per_s=18.0, burst=4)
"""What :class:`HttpCardSink` declares by default: 90 % of a 20 QPS platform, small bursts."""


class HttpCardSink:
    """A :class:`adapters.base.CardSink` for :class:`FakeCardAPI` over aiohttp.

    ``rate`` (or ``rates`` per bucket) is the budget the sink declares to the
    streamer; keep it below the fake's limit, as a real adapter keeps headroom
    under a platform's published quota. ``one_bucket=True`` declares one
    budget for every call of the app (match the fake's ``one_bucket``), keyed
    by the target's workspace when it has one. ``session``: a shared aiohttp
    session the caller owns; without one the sink opens (and closes) its own.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_chars: int = 3000,
        rate: RateLimit = DEFAULT_SINK_RATE,
        rates: Mapping[str, RateLimit] | None = None,
        one_bucket: bool = False,
        platform: str = "fake",
        app_key: str = "fake-app",
        render: Callable[[CardSnapshot], str] = render_markdown,
        timeout_s: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_chars = max_chars
        self.platform = platform
        self._rate = rate
        self._rates = dict(rates or {})
        self._one_bucket = one_bucket
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
        """One bucket per app and API, or one per app (``one_bucket``), as the fake limits them."""
        if self._one_bucket:
            return f"{self.platform}:{target.workspace_id or self._app_key}:{APP_BUCKET}", self._rates.get(APP_BUCKET, self._rate)
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
            raw = retry_header or payload.get("retry_after")
            retry_after = parse_retry_after(None if raw is None else str(raw))
            raise RateLimited(retry_after, f"card API throttled ({status}{' ' + code if code else ''})")
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
        if not payload.get("card_id"):
            raise TransientError("card API: create answered without a card_id")
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
        await self._request("POST", "/messages", self._body(target, snapshot))
