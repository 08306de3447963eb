"""The console's per-answer controls on the server: a 👍 / 👎 (a 👎 with its reason) and a Refresh of an answer.

``POST /console/answers/{turn_id}/feedback`` ``{"vote": "up"|"down", "reason"?}``
keeps the session's vote in the gateway's feedback store, through the same
calls Slack's and DingTalk's buttons make (:meth:`~botgateway.gateway.Gateway.vote`,
then :meth:`~botgateway.gateway.Gateway.feedback_reason` for a 👎's one-line
reason): one vote per voter and answer, stored with what the answer used, read
by ``botgateway feedback`` and the console's Feedback page. It answers
``{"turn_id", "vote", "note"}`` (the note in the asker's language).

``POST /console/answers/{turn_id}/refresh`` asks the answer's question again as
a Refresh button does (:meth:`~botgateway.gateway.Gateway.refresh`: caches
bypassed, the session's own access, limits and audit), in the same
conversation, and streams the new turn as ``POST /v1/turns`` with snapshots
does: ``turn``, the new card's ``snapshot`` messages, then ``done`` or
``error``. Closing the stream stops the turn, as it does for a question.

Both are for the session that asked the answer (an admin may vote on anyone's),
with the session's CSRF token. The web adapter leaves its front where they find
it (:data:`WEB_FRONT`); without one (the console served alone) they answer 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from adapters.web.body import BadRequest
from adapters.web.follow import ClientGone, follow
from adapters.web.front import TurnOwner, WebFront
from adapters.web.inert import InertEvents
from adapters.web.routes import last_snapshot, locale_of, note_final, send_board, sse_name
from adapters.web.session import csrf_ok, request_session
from adapters.web.sse import SseStream
from adapters.web.tap import EventTap
from botgateway.answers import MAX_REASON_CHARS, Vote
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.events import TurnEvent, event_to_dict
from botgateway.messages import InboundMessage, Submission
from botgateway.principal import Principal
from botgateway.strings import t

__all__ = ["WEB_FRONT", "answer_routes"]

WEB_FRONT = web.AppKey("botgateway.web.front", WebFront)
"""Where the root application keeps the web adapter's :class:`~adapters.web.front.WebFront` (set by
:meth:`adapters.web.adapter.WebAdapter.mount`)."""


class _Refused(Exception):
    """A request the routes turn down: its status, message and code (as the console's other errors say them)."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def _error(refused: _Refused) -> web.Response:
    code = {"code": refused.code} if refused.code else {}
    return web.json_response({"error": refused.message, **code}, status=refused.status)


async def _caller(request: web.Request) -> tuple[WebFront, Principal]:
    """The web front and the session's principal; refused without a session, its CSRF token or a front."""
    session = await request_session(request)
    if session is None:
        raise _Refused(401, "not logged in", "login")
    if not csrf_ok(request, session):
        raise _Refused(403, "the request lacks the session's X-CSRF-Token", "csrf")
    front = request.config_dict.get(WEB_FRONT)
    if front is None:
        raise _Refused(503, "the chat is not served by this process", "unavailable")
    return front, session.principal


async def _owned(front: WebFront, principal: Principal, turn_id: str, *, admins: bool) -> TurnOwner:
    """The owner of ``turn_id`` when it is the caller's (or, with ``admins``, the caller is an admin); else 404."""
    owner = await front.owner(turn_id)
    if owner is None or (owner.principal != principal.id and not (admins and front.is_admin(principal))):
        raise _Refused(404, f"no answer {turn_id!r} of yours is known", "not_found")
    return owner


async def _json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body (an empty body is an empty object)."""
    if not request.can_read_body:
        return {}
    if request.content_type != "application/json":
        raise _Refused(415, "send the body as JSON", "bad_request")
    try:
        body = await request.json()
    except ValueError as exc:
        raise _Refused(400, "the body is not valid JSON", "bad_request") from exc
    if not isinstance(body, dict):
        raise _Refused(400, "send a JSON object", "bad_request")
    return body


def _vote_of(body: dict[str, Any]) -> tuple[Vote, str]:
    """The vote and the reason (only a 👎 has one) the body asks for."""
    vote = body.get("vote")
    if vote not in ("up", "down"):
        raise _Refused(400, "'vote' must be \"up\" or \"down\"", "bad_request")
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise _Refused(400, "'reason' must be a string", "bad_request")
    if reason.strip() and vote != "down":
        raise _Refused(400, "only a 👎 takes a reason", "bad_request")
    return ("up" if vote == "up" else "down"), reason.strip()[: MAX_REASON_CHARS * 4]


class _Answers:
    """The handlers (stateless: each request finds the front and the session on its application)."""

    async def feedback(self, request: web.Request) -> web.StreamResponse:
        """A 👍 or 👎 (with its reason) of the session on the answer of the path."""
        try:
            front, principal = await _caller(request)
            turn_id = request.match_info["turn_id"]
            await _owned(front, principal, turn_id, admins=True)
            body = await _json_object(request)
            vote, reason = _vote_of(body)
            gateway = front.running_gateway(asking=False)
        except _Refused as refused:
            return _error(refused)
        except BadRequest as exc:
            return _error(_Refused(exc.status, exc.message, "unavailable"))
        locale = locale_of(request, body)
        note = await gateway.vote(turn_id, principal, vote, locale=locale)
        if reason and note != t(locale, "feedback_failed"):
            note = await gateway.feedback_reason(turn_id, principal, reason, locale=locale)
        if note == t(locale, "feedback_failed"):
            return web.json_response({"error": note, "code": "not_recorded"}, status=503)
        return web.json_response({"turn_id": turn_id, "vote": vote, "note": note})

    async def refresh(self, request: web.Request) -> web.StreamResponse:
        """The answer of the path asked again by its asker, streamed as a new turn."""
        try:
            front, principal = await _caller(request)
            turn_id = request.match_info["turn_id"]
            owner = await _owned(front, principal, turn_id, admins=False)
            body = await _json_object(request)
            gateway = front.running_gateway()
        except _Refused as refused:
            return _error(refused)
        except BadRequest as exc:
            return _error(_Refused(exc.status, exc.message, "unavailable"))
        # The press as the asker's message in the answer's conversation; the gateway puts the question back in.
        msg = front.message(principal, "", owner.conversation, locale_of(request, body))
        submission = await gateway.refresh(turn_id, msg, front.sink, BufferPolicy.from_config())
        if submission.status in ("started", "queued"):
            await front.remember(submission.turn_id, TurnOwner(principal=principal.id, conversation=owner.conversation))
        return await _stream(request, front, msg, submission)


async def _stream(request: web.Request, front: WebFront, msg: InboundMessage, submission: Submission) -> web.StreamResponse:
    """The new turn as ``POST /v1/turns`` streams it with snapshots (no events of its own: its card says it all)."""
    locale = msg.target.locale
    async with await SseStream.open(request, ping_s=front.config.web.keepalive_s) as stream:
        conversation = msg.target.chat_id
        await stream.send("turn", {"turn_id": submission.turn_id, "conversation": conversation,
                                   "status": submission.status, "position": submission.position})
        if submission.status not in ("started", "queued"):
            for shown in InertEvents(locale)(await note_final(submission, locale)):
                await stream.send(sse_name(shown), event_to_dict(shown))
        elif not await _follow_card(stream, front, msg, submission, request):
            return stream.response  # the client left: the turn was stopped
        await stream.close()
    return stream.response


async def _follow_card(stream: SseStream, front: WebFront, msg: InboundMessage, submission: Submission,
                       request: web.Request) -> bool:
    """Send the turn's card until it is final, then how the turn ended; False (the turn stopped) when the client
    left first."""
    inert = InertEvents(msg.target.locale)

    async def write(event: TurnEvent, elapsed: float) -> None:
        for shown in inert(event):
            await stream.send(sse_name(shown), {**event_to_dict(shown), "t": elapsed})

    turn_id = submission.turn_id
    cards = asyncio.ensure_future(_card_of(stream, front, turn_id))
    try:
        # An empty tap: the turn's end (or the client leaving, which stops it) is what is followed here.
        await follow(front.stop, msg, submission, EventTap(1), request, write)
    except ClientGone:
        _drop(cards)
        return False
    board = front.sink.board(turn_id)
    if board is None or not board.snapshot.final:
        cards.cancel()  # the card is not kept here (the turn moved): the console reads the turn's record
    await last_snapshot(cards)
    return True


def _drop(task: asyncio.Future[None]) -> None:
    """Cancel ``task``, or take its outcome when it ended (a stream its client closed fails its writes)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


async def _card_of(stream: SseStream, front: WebFront, turn_id: str) -> None:
    await send_board(stream, await front.sink.wait_board(turn_id), turn_id)


def answer_routes() -> list[web.RouteDef]:
    """The routes of the per-answer controls (see the module's doc)."""
    answers = _Answers()
    return [
        web.post("/console/answers/{turn_id}/feedback", answers.feedback),
        web.post("/console/answers/{turn_id}/refresh", answers.refresh),
    ]
