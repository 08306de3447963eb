"""A fake chat-card platform over HTTP on loopback (the ``CardSink`` that talks to it is importable from here too).

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

:class:`HttpCardSink` (:mod:`tests.fakes.card_api_sink`) implements
:class:`adapters.base.CardSink` against it with aiohttp, mapping statuses to
the typed sink errors (429 / 403 QpsLimit → ``RateLimited``, 404/410 →
``CardGone``, 413 → ``TooLong``, 5xx and connection errors →
``TransientError``, other 4xx → ``PermanentError``). The buckets and scripted
failures live in :mod:`tests.fakes.card_api_limits`, the records and what tests
read from them in :mod:`tests.fakes.card_api_records`.

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
from typing import Any

from aiohttp import web

from botgateway.sink import target_to_dict
from tests.fakes.card_api_limits import APP_BUCKET, BUCKET_OF_OP, CardAPILimits, ScriptedFailure, format_seconds
from tests.fakes.card_api_records import CallRecord, CardAPIReadings, FakeCard, FakeMessage, has_output
from tests.fakes.card_api_sink import DEFAULT_SINK_RATE, HttpCardSink, snapshot_to_dict

__all__ = [
    "APP_BUCKET",
    "BUCKET_OF_OP",
    "DEFAULT_SINK_RATE",
    "CallRecord",
    "FakeCard",
    "FakeCardAPI",
    "FakeMessage",
    "Gate",
    "HttpCardSink",
    "snapshot_to_dict",
    "target_to_dict",
]


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


class FakeCardAPI(CardAPIReadings):
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
        self._limits = CardAPILimits(rate_per_s=rate_per_s, burst=burst, rates=rates, one_bucket=one_bucket, clock=clock)
        self.calls: list[CallRecord] = []
        """Every request, in arrival order."""
        self.cards: dict[str, FakeCard] = {}
        """Cards by id."""
        self.messages: list[FakeMessage] = []
        """Fallback messages, in order."""
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
        self._limits.script(op, ScriptedFailure(status, times, retry_after, body or default, when))

    def clear_failures(self, op: str | None = None) -> None:
        """Forget the scripted failures of ``op`` (of every op when None): the platform recovered."""
        self._limits.clear(op)

    def hold(self, op: str) -> Gate:
        """Hold every request of ``op`` from now on until the returned gate is released."""
        gate = Gate()
        self._gates[op] = gate
        return gate

    def expire(self, card_id: str) -> None:
        """The card disappears: later updates and finalizes get 404."""
        self.cards[card_id].expired = True

    # --- observation (what tests read from the records is CardAPIReadings') -------------

    async def wait_for(self, predicate: Callable[[FakeCardAPI], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate(self)`` holds (checked after every request event); TimeoutError otherwise."""
        self._waiters += 1
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self)), timeout)
        finally:
            self._waiters -= 1

    # --- handlers ---------------------------------------------------------------

    async def _notify(self) -> None:
        if self._waiters:
            async with self._changed:
                self._changed.notify_all()

    def _delay(self) -> float:
        return self.latency_s + (self._random.uniform(0, self.jitter_s) if self.jitter_s else 0.0)

    async def _record(self, request: web.Request, op: str, card_id: str | None) -> tuple[CallRecord, Any]:
        """Record the call as it arrives; returns the record and the parsed JSON (None when it is not JSON)."""
        arrived = self._clock()
        try:
            parsed = await request.json()
        except ValueError:
            parsed = None
        body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        snapshot = body.get("snapshot") if isinstance(body.get("snapshot"), dict) else {}
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        record = CallRecord(
            op=op,
            card_id=card_id,
            arrived_at=arrived,
            turn_id=str(target.get("turn_id", "")),
            answer_len=len(str(snapshot.get("answer", ""))),
            has_output=has_output(snapshot),
            body=body if self.keep_bodies else {},
            index=len(self.calls),
        )
        self.calls.append(record)
        await self._notify()
        return record, parsed

    async def _handle(
        self, request: web.Request, op: str, card_id: str | None
    ) -> tuple[CallRecord, dict[str, Any], web.Response | None]:
        """Record the call, then apply the rate limit, scripts, gates, latency and size limit.

        Returns the record, the parsed body and, when the call is refused, the answer to send.
        """
        record, parsed = await self._record(request, op, card_id)
        body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        if not (isinstance(parsed, dict) and isinstance(parsed.get("text"), str)):
            payload = {"code": "InvalidBody", "message": "body must be a JSON object with a string 'text'"}
            return record, body, await self._answer(record, 400, payload, reason="invalid")
        refusal = self._limits.refusal(op, body, self.retry_after_s)
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
            headers["Retry-After"] = format_seconds(retry_after)
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
