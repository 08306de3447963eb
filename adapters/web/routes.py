"""The API's routes under ``/v1``: ask (SSE), look up, stop, clear, list tools, watch a card, approve.

``POST /v1/turns`` streams the turn as Server-Sent Events: first ``turn``
(``{"turn_id", "conversation", "status", "position"}``), then each of the
core's events as ``botgateway ask --json`` prints it (``event:`` its kind,
``data:`` its JSON with ``t``), and last ``done`` (the ``turn_done`` event,
its ``result`` the turn's result) or ``error`` (a ``turn_failed`` event: a
failure, a stop, a refusal). Closing the connection stops the turn, as "stop"
does. A turn may be looked up, stopped and watched by its asker and by admins
(``gateway.admins`` or a role named ``admin``); anyone else gets 404.

With ``"snapshots": true`` in its body, ``POST /v1/turns`` also interleaves the
turn's card as ``snapshot`` messages (the JSON ``GET /v1/turns/{id}/card``
sends), from the process that runs the turn, so a console needs one stream
whichever replica or worker answers it: the newest snapshot at each change
(a slow reader skips versions), the last one ``"final": true``, which may come
after ``done``/``error``; the stream ends once both were sent. ``"locale"``
(``en``, ``zh-CN``) in the body, else ``Accept-Language``, chooses the language
of the API's own messages. Every stream sends ``: ping`` comments after
``web.keepalive_s`` of silence. Model and tool text goes out inert (:mod:`adapters.web.inert`): the
``answer_delta`` and ``thought_delta`` texts join into the inert answer and thought, a construct still open at
their end held back until it is complete. A refusal is the API's error (:mod:`adapters.web.api_errors`); a stop's
or a vote's keeps its answer beside it (``{"error", "turn_id", "stop"}``, ``{"error", "answer", "note"}``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from adapters.web.auth import principal_of
from adapters.web.body import BadRequest, read_json, text_field
from adapters.web.follow import ClientGone, follow
from adapters.web.front import TurnOwner, WebFront
from adapters.web.inert import InertEvents, web_inert
from adapters.web.sink import CardBoard, WebSink
from adapters.web.snapshots import snapshot_to_dict
from adapters.web.sse import SseStream, gone
from adapters.web.tap import EventTap
from botgateway.events import TurnDone, TurnEvent, TurnFailed, TurnResult, event_to_dict
from botgateway.messages import Submission
from botgateway.principal import Principal
from botgateway.stores.base import UNFINISHED, AuditRecord
from botgateway.strings import normalize_locale, t

__all__ = ["FINAL_SNAPSHOT_WAIT_S", "api_routes", "locale_of", "note_final", "send_board", "sse_name"]

FINAL_SNAPSHOT_WAIT_S = 5.0
"""Longest wait, once a turn ended, for its final snapshot to be sent on a stream that asked for snapshots."""

_STOP_REFUSED = {
    "not_yours": (403, "only the turn's asker or an admin may stop it"),
    "already_done": (409, "the turn has already ended"),
    "unreachable": (503, "the process running the turn did not answer in time; try again"),
}
"""A stop that did not stop: its status and words, by answer."""


def locale_of(request: web.Request, data: dict[str, Any] | None = None) -> str:
    """The asker's language: ``data["locale"]`` when the body names one, else ``zh-CN`` when the client prefers
    Chinese (``Accept-Language``), else ``en``."""
    named = (data or {}).get("locale")
    if isinstance(named, str) and named.strip():
        return normalize_locale(named.strip())
    return "zh-CN" if request.headers.get("Accept-Language", "").lower().startswith("zh") else "en"


def sse_name(event: TurnEvent) -> str:
    """The SSE event name of ``event``: ``done`` and ``error`` for the last ones, else its kind."""
    if isinstance(event, TurnDone):
        return "done"
    if isinstance(event, TurnFailed):
        return "error"
    return event.kind


def api_routes(front: WebFront) -> list[web.RouteDef]:
    """The ``/v1`` routes (paths relative to the sub-application mounted at ``/v1``)."""
    routes = _Routes(front)
    return [
        web.post("/turns", routes.ask),
        web.get("/turns/{turn_id}", routes.result),
        web.post("/turns/{turn_id}/stop", routes.stop),
        web.get("/turns/{turn_id}/card", routes.card),
        web.delete("/conversations/{conversation}", routes.clear),
        web.get("/tools", routes.tools),
        web.post("/approvals/{code}", routes.approve),
    ]


async def note_final(submission: Submission, locale: str = "en") -> TurnDone | TurnFailed:
    """How a question answered without a turn ended: a refusal as ``error``, a note (``/whoami``, a clear) as done
    (``locale``: the language of a refusal that came without its own words)."""
    text = submission.message
    if not text and submission.done is not None:
        outcome = await submission.done
        snapshot = outcome.snapshot
        text = outcome.answer or (snapshot.answer or snapshot.error if snapshot is not None else "")
    if submission.status == "refused":
        return TurnFailed(reason="refused", message=text or t(locale, "web_question_refused"))
    return TurnDone(result=TurnResult(answer=text, rounds=0))


class _Routes:
    """The handlers, over one :class:`WebFront`."""

    def __init__(self, front: WebFront) -> None:
        self._front = front

    async def ask(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/turns`` ``{"question", "conversation"?, "snapshots"?, "locale"?}``: the turn as SSE."""
        front, principal = self._front, principal_of(request)
        data = await read_json(request, front.config.web.max_body_bytes)
        question = text_field(data, "question", required=True, max_chars=front.config.web.max_body_bytes)
        try:
            conversation = front.checked_conversation(text_field(data, "conversation") or front.new_conversation())
        except BadRequest as exc:
            raise exc.about("conversation") from None
        snapshots = data.get("snapshots", False)
        if not isinstance(snapshots, bool):
            raise BadRequest("'snapshots' must be true or false", param="snapshots")
        msg = front.message(principal, question, conversation, locale_of(request, data))
        tap = EventTap(front.config.web.max_pending_events)
        submission = await front.ask(msg, tap)
        async with await SseStream.open(request, ping_s=front.config.web.keepalive_s) as stream:
            await stream.send("turn", {"turn_id": submission.turn_id, "conversation": conversation,
                                       "status": submission.status, "position": submission.position})
            if submission.status not in ("started", "queued"):
                final = await note_final(submission, msg.target.locale)
                for shown in InertEvents(msg.target.locale)(final):
                    await stream.send(sse_name(shown), event_to_dict(shown))
            elif not await _follow_turn(stream, front, msg, submission, tap, request, snapshots=snapshots):
                return stream.response  # the client left: its turn was stopped
            await stream.close()
        return stream.response

    async def result(self, request: web.Request) -> web.Response:
        """``GET /v1/turns/{id}``: a finished turn's result, from its audit record."""
        turn_id, owner = await self._owned(request)
        record = await self._front.record(turn_id, owner)
        if record is None or record.outcome == UNFINISHED:
            return web.json_response({"turn_id": turn_id, "conversation": owner.conversation, "status": "running"},
                                     status=202)
        return web.json_response(_record_json(record, owner, locale_of(request)))

    async def stop(self, request: web.Request) -> web.Response:
        """``POST /v1/turns/{id}/stop``: stop a running or queued turn, as "stop" does."""
        turn_id, owner = await self._owned(request)
        answer = await self._front.stop(turn_id, owner.principal)  # an admin stops it as its asker would
        if answer != "stopped":
            status, message = _STOP_REFUSED.get(answer, (403, f"the turn was not stopped ({answer})"))
            raise BadRequest(message, status, code=answer, extra={"turn_id": turn_id, "stop": answer})
        return web.json_response({"turn_id": turn_id, "stop": answer})

    async def card(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/turns/{id}/card``: the turn's card as SSE ``snapshot`` messages, until it is final (or ``end``
        when this process let the card go before)."""
        turn_id, _owner = await self._owned(request)
        board = self._front.sink.board(turn_id)
        if board is None:
            raise BadRequest("this turn's card is not kept here (finished long ago, or asked in another process)", 404)
        async with await SseStream.open(request, ping_s=self._front.config.web.keepalive_s) as stream:
            if await _until_gone(request, send_board(stream, board, turn_id)):
                await stream.close()
        return stream.response

    async def clear(self, request: web.Request) -> web.Response:
        """``DELETE /v1/conversations/{id}``: forget the caller's conversation (409 while a turn runs in it)."""
        principal = principal_of(request)
        conversation = self._front.checked_conversation(request.match_info["conversation"])
        if not await self._front.clear(principal, conversation):
            raise BadRequest("a turn is running in this conversation; stop it or wait for it to end", 409)
        return web.json_response({"conversation": conversation, "cleared": True})

    async def tools(self, request: web.Request) -> web.Response:
        """``GET /v1/tools``: the tools the caller may use (as the model is offered them)."""
        principal = principal_of(request)
        decision = self._front.decision(principal)
        return web.json_response({
            "principal": principal.id,
            "roles": list(decision.grant.roles) if decision.grant is not None else [],
            "tools": self._front.tool_list(principal),
        })

    async def approve(self, request: web.Request) -> web.Response:
        """``POST /v1/approvals/{code}`` ``{"approve": true|false, "token"?}``: a vote on a waiting call."""
        principal = principal_of(request)
        data = await read_json(request, self._front.config.web.max_body_bytes)
        approve = data.get("approve")
        if not isinstance(approve, bool):
            raise BadRequest("'approve' must be true or false", param="approve")
        token = text_field(data, "token") or None
        result = await self._front.running_gateway(asking=False).decide_approval(
            request.match_info["code"], principal, approved=approve, locale=locale_of(request, data), token=token)
        body = {"answer": result.answer, "note": result.note}
        if result.answer != "decided":
            status = 404 if result.answer == "unknown" else 403
            raise BadRequest(result.note or f"the vote was not counted ({result.answer})", status, code=result.answer,
                             extra=body)
        return web.json_response(body)

    async def _owned(self, request: web.Request) -> tuple[str, TurnOwner]:
        """The turn of the path and its owner; 404 when unknown or neither the caller's nor the caller an admin."""
        principal: Principal = principal_of(request)
        turn_id = request.match_info["turn_id"]
        owner = await self._front.owner(turn_id)
        if owner is None or (owner.principal != principal.id and not self._front.is_admin(principal)):
            raise BadRequest(f"no turn {turn_id!r} of yours is known", 404)
        return turn_id, owner


async def _follow_turn(
    stream: SseStream, front: WebFront, msg: Any, submission: Submission, tap: EventTap, request: web.Request, *,
    snapshots: bool,
) -> bool:
    """Send the turn's events, inert (and, with ``snapshots``, its card's) until it ended; False when the client
    left."""
    inert = InertEvents(msg.target.locale)

    async def write(event: TurnEvent, elapsed: float) -> None:
        for shown in inert(event):
            await stream.send(sse_name(shown), {**event_to_dict(shown), "t": elapsed})

    cards = asyncio.ensure_future(_card_of(stream, front.sink, submission.turn_id)) if snapshots else None
    stayed = False
    try:
        await follow(front.stop, msg, submission, tap, request, write)
        stayed = True
    except ClientGone:
        return False
    finally:
        if cards is not None and not (stayed and _final_here(front.sink, submission.turn_id)):
            cards.cancel()  # the client left, or no card here to finish (the turn moved, or crashed before one)
        if cards is not None:
            await last_snapshot(cards)
    return True


async def last_snapshot(cards: asyncio.Task[Any]) -> None:
    """Let the card's stream send its last snapshot, the card being final once the turn ended; a stream that does not
    end within :data:`FINAL_SNAPSHOT_WAIT_S` is cancelled. A ConnectionError of the stream is the caller's."""
    done, _ = await asyncio.wait([cards], timeout=FINAL_SNAPSHOT_WAIT_S)
    if not done:
        cards.cancel()
    elif not cards.cancelled():
        cards.result()


def _final_here(sink: WebSink, turn_id: str) -> bool:
    board = sink.board(turn_id)
    return board is not None and board.snapshot.final


async def _card_of(stream: SseStream, sink: WebSink, turn_id: str) -> None:
    """The turn's card on ``stream`` once the turn opened it (a queued turn opens it when it starts)."""
    await send_board(stream, await sink.wait_board(turn_id), turn_id)


async def send_board(stream: SseStream, board: CardBoard, turn_id: str) -> None:
    """Send the board's snapshot now and at each change (the newest only) until it is final; ``end`` (``{"turn_id",
    "reason": "dropped"}``) when the sink let it go first, so no watcher waits for a change that cannot come."""
    version = 0
    while True:
        if board.version != version:
            version = board.version
            await stream.send("snapshot", snapshot_to_dict(board.snapshot, turn_id))
            if board.snapshot.final:
                return
        if board.dropped:
            await stream.send("end", {"turn_id": turn_id, "reason": "dropped"})
            return
        await board.changed_since(version)


async def _until_gone(request: web.Request, work: Any) -> bool:
    """Run ``work`` (a coroutine) until it ends (True) or the client is gone first (False: it is cancelled)."""
    task = asyncio.ensure_future(work)
    left = asyncio.ensure_future(gone(request))
    try:
        await asyncio.wait([task, left], return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
        if not task.done():
            task.cancel()
    if task.cancelled():
        return False
    task.result()  # a ConnectionError of the stream is the caller's
    return True


def _record_json(record: AuditRecord, owner: TurnOwner, locale: str) -> dict[str, Any]:
    """A finished turn as ``GET /v1/turns/{id}`` answers it (the answer inert, in ``locale``)."""
    ok = record.outcome == "done"
    return {
        "turn_id": record.turn_id,
        "conversation": owner.conversation,
        "status": "done" if ok else "failed",
        "outcome": record.outcome,
        "ok": ok,
        "question": record.question,
        "answer": web_inert(locale)(record.answer),
        "tool_calls": [dict(call) for call in record.tool_calls],
        "usage": {"prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
                  "total_tokens": record.prompt_tokens + record.completion_tokens},
        "started_at": record.started_at,
        "duration_s": record.duration_s,
        "principal": record.principal,
        "role": record.role,
    }
