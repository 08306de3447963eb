"""Card delivery: the one owner of the app's DingTalk cards, the answer's AI card and the buttons' cards.

The answer's AI card (:class:`DingTalkCardSink`): ``createAndDeliver`` once, then
full snapshots through ``PUT /v1.0/card/streaming``, the last one finalizing it.
Every card call of the app draws from one shared bucket (DingTalk limits each
app to about 20 QPS per API). Throttle answers are counted by the
:class:`~adapters.dingtalk.throttle.ThrottleMonitor` so new turns can degrade
to markdown replies. A card is finalized from its ``outTrackId`` alone, so the
gateway can close cards left open by a crash using only the stored target.

The buttons' cards: each call waiting for an approval gets a card of its own
with Approve and Deny (:class:`ApprovalCards`), and a typed question's AI card
is created with its turn id (:func:`answer_params`), so that once finished it
shows its Refresh and 👍 / 👎 buttons when the template has them: no call of
their own. Presses of either call back on :data:`CARD_CALLBACK_TOPIC`; what a
press means is read by :mod:`adapters.dingtalk.approval_cards` and
:mod:`adapters.dingtalk.answer_buttons`, which this module never imports. The
markdown message a card falls back to goes through a :class:`MessageSender`
(the markdown sink's sender), so no module that sends messages is imported
here either: the modules around it depend on it, not it on them.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Protocol

import structlog

from adapters.dingtalk.inert import dingtalk_inert
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.render import render_card
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.answers import is_question
from botgateway.budget import RateLimit
from botgateway.cards.render import approval_text
from botgateway.sink import CardHandle, CardOp, CardTarget, PermanentError, RateLimited
from botgateway.snapshot import ApprovalPrompt, CardSnapshot, ToolLine

__all__ = [
    "CARD_CALLBACK_TOPIC",
    "TURN_PARAM",
    "ApprovalCards",
    "DingTalkCardSink",
    "MessageSender",
    "answer_params",
    "app_limit",
    "carrier_id",
    "deliver_body",
    "open_space_id",
    "undelivered",
]

log = structlog.get_logger(__name__)

def app_limit(qps: float) -> RateLimit:
    """The budget of one DingTalk API for the whole app: ``qps`` calls a second, half of them at once.

    The limit on arrivals (the QPS itself, each call counted from its grant until a second after its answer)
    keeps every second as DingTalk counts it under the limit however the network bunches the calls. The bucket
    lets half a second's calls go at once and spaces the rest over half a second: finals due together (a burst
    of answers ending) take a second's calls in the first half of it, where spacing them all would stretch
    ``N`` finals over ``N / qps`` seconds from the first; and of a burst of new cards, only the first half are
    created before the model's first words, the rest a moment later, already showing them.
    """
    calls = max(int(qps), 1)
    return RateLimit(rate_per_s=float(qps), burst=max(calls // 2, 1), arrivals_per_s=calls)


CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
"""The Stream-mode topic of card button presses (an approval card's, a final answer's)."""

TURN_PARAM = "turn_id"
"""The card variable that shows a final answer's buttons once the card is finished, and the param each button
sends: the answer's turn id."""


class MessageSender(Protocol):
    """What a card falls back to: one markdown message to the card's chat (the markdown sink's sender)."""

    def rate_key(self, target: CardTarget) -> tuple[str, RateLimit]:
        """The per-chat message budget."""
        ...

    async def send(self, target: CardTarget, snapshot: CardSnapshot) -> str:
        """Deliver ``snapshot`` as a markdown message; returns the route used."""
        ...


def undelivered(answer: object) -> str | None:
    """Why ``createAndDeliver`` did not deliver the card (HTTP 200 with a failed ``deliverResults`` entry), else
    None."""
    result = answer.get("result") if isinstance(answer, dict) else None
    results = result.get("deliverResults") if isinstance(result, dict) else None
    for item in results if isinstance(results, list) else ():
        if isinstance(item, dict) and item.get("success") is False:
            return str(item.get("errorMsg") or "delivery failed")[:200]
    return None


def carrier_id(answer: object) -> str:
    """The ``carrierId`` of the delivered card in a ``createAndDeliver`` answer (empty when it has none).

    A message quoting the card names it by this id (its ``originalProcessQueryKey``): the card's text does not
    come with the quote.
    """
    result = answer.get("result") if isinstance(answer, dict) else None
    results = result.get("deliverResults") if isinstance(result, dict) else None
    for item in results if isinstance(results, list) else ():
        if isinstance(item, dict) and item.get("success") is not False and isinstance(item.get("carrierId"), str):
            return item["carrierId"]
    return ""


def open_space_id(target: CardTarget) -> str:
    """``dtv1.card//IM_GROUP.{conversationId}`` for a group, ``dtv1.card//IM_ROBOT.{staffId}`` for a 1:1 chat."""
    if target.is_group:
        return f"dtv1.card//IM_GROUP.{target.chat_id}"
    return f"dtv1.card//IM_ROBOT.{target.user_id}"


def deliver_body(
    target: CardTarget, *, template_id: str, out_track_id: str, params: dict[str, str], robot_code: str,
    forward: bool = True,
) -> dict[str, object]:
    """The ``createAndDeliver`` body of a card from ``template_id`` for ``target``'s chat, its button presses
    calling back through Stream mode; ``forward``: whether people may forward the card."""
    body: dict[str, object] = {
        "cardTemplateId": template_id,
        "outTrackId": out_track_id,
        "callbackType": "STREAM",
        "cardData": {"cardParamMap": params},
        "openSpaceId": open_space_id(target),
        "userIdType": 1,
    }
    if target.is_group:
        body["imGroupOpenSpaceModel"] = {"supportForward": forward}
        body["imGroupOpenDeliverModel"] = {"robotCode": robot_code}
    else:
        body["imRobotOpenSpaceModel"] = {"supportForward": forward}
        body["imRobotOpenDeliverModel"] = {"spaceType": "IM_ROBOT", "robotCode": robot_code}
    return body


def answer_params(target: CardTarget) -> dict[str, str]:
    """The card variables a card for ``target`` is created with so that, once finished, it shows the answer's
    buttons: the turn id of a typed question (:func:`~botgateway.answers.book.is_question`); none for anything
    else (a report's or an alert's card, which get no turn id)."""
    return {TURN_PARAM: target.turn_id} if is_question(target) else {}


class ApprovalCards:
    """Delivers and closes the approval cards of one app: for each call that waits, an interactive card from
    ``adapters.dingtalk.approval_template_id`` (variables ``prompt``, ``code``, ``token``, ``status``) whose ``status``
    says how it was decided once it is (the template then hides its buttons).

    Which approval cards a handle has shown travels in its ``data`` (``approvals``), so :meth:`sync` is a pure
    function of the handle and the snapshot.
    """

    def __init__(self, api: DingTalkOpenAPI, *, template_id: str, robot_code: str) -> None:
        """Cards from ``template_id`` (``adapters.dingtalk.approval_template_id``), sent as ``robot_code``."""
        self._api = api
        self._template_id = template_id
        self._robot_code = robot_code

    async def sync(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Deliver a card for each approval new in ``snapshot``; close those no longer waiting (all, once final).

        Cards are kept per call (``handle.data["approvals"]``): a code may be handed out again, a call id not.
        """
        shown: tuple[str, ...] = tuple(handle.data.get("approvals", ()))
        waiting = {} if snapshot.final else {p.call_id: p for p in snapshot.approvals}
        kept = list(shown)
        for call_id, prompt in waiting.items():
            if call_id in shown:
                continue
            if await self._deliver(handle.target, prompt, approval_text(prompt, snapshot.locale)):
                kept.append(call_id)
        lines = {b.call_id: b for b in snapshot.blocks if isinstance(b, ToolLine)}
        for call_id in shown:
            if call_id not in waiting:
                line = lines.get(call_id)
                await self._close(handle.target, call_id, (line.approval or line.summary) if line else "")
                kept.remove(call_id)
        return dataclasses.replace(handle, data={**handle.data, "approvals": tuple(kept)})

    async def _deliver(self, target: CardTarget, prompt: ApprovalPrompt, text: str) -> bool:
        params = {"prompt": dingtalk_inert(text, target.locale), "code": prompt.code, "token": prompt.token,
                  "status": ""}
        # Not forwardable: a forwarded approval would mislead.
        body = deliver_body(target, template_id=self._template_id, out_track_id=_track_id(target, prompt.call_id),
                            params=params, robot_code=self._robot_code, forward=False)
        try:
            refused = undelivered(await self._api.create_and_deliver(body))
        except Exception as exc:  # the answer's own card still says how to decide by reply
            log.warning("dingtalk.approval_card_failed", code=prompt.code, error=str(exc) or type(exc).__name__)
            return False
        if refused is not None:
            log.warning("dingtalk.approval_card_undelivered", code=prompt.code, error=refused)
        return refused is None

    async def _close(self, target: CardTarget, call_id: str, outcome: str) -> None:
        body = {"outTrackId": _track_id(target, call_id),
                "cardData": {"cardParamMap": {"status": dingtalk_inert(outcome or "—", target.locale)}}}
        try:
            await self._api.update_card(body)
        except Exception as exc:  # a stale button earns its presser a "no approval waiting" note, nothing worse
            log.warning("dingtalk.approval_card_close_failed", call_id=call_id, error=str(exc) or type(exc).__name__)


def _track_id(target: CardTarget, call_id: str) -> str:
    """One approval card per call of a turn."""
    return f"bg-approval-{target.turn_id}-{call_id}"


class DingTalkCardSink:
    """A :class:`~botgateway.sink.CardSink` streaming into an AI card built from ``template_id``."""

    platform = "dingtalk"

    def __init__(
        self,
        api: DingTalkOpenAPI,
        *,
        template_id: str,
        robot_code: str,
        content_key: str = "content",
        qps: float = 20.0,
        max_chars: int = 3000,
        sender: MessageSender,
        monitor: ThrottleMonitor | None = None,
        approvals: ApprovalCards | None = None,
        answer_buttons: bool = False,
    ) -> None:
        """``approvals`` delivers a card with buttons for each call waiting for an approval (None: reply by text);
        ``answer_buttons``: the template has a final answer's Refresh and 👍 / 👎 buttons, shown once the card of a
        typed question (created with its turn id) is finished."""
        self.max_chars = max_chars
        """Answer text per card; longer answers continue in another card."""
        self._api = api
        self._template_id = template_id
        self._robot_code = robot_code
        self._key = content_key
        self._limit = app_limit(qps)
        self._sender = sender
        self._monitor = monitor
        self._approvals = approvals
        self._answer_buttons = answer_buttons

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """All card calls of the app share one bucket; the fallback uses the chat's message budget."""
        if op == "fallback":
            return self._sender.rate_key(target)
        return f"dingtalk:{self._robot_code}:card", self._limit

    def _throttled(self, exc: RateLimited) -> None:
        if self._monitor is not None:
            self._monitor.record()
        log.info("dingtalk.card_throttled", retry_after=exc.retry_after)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Create the card and deliver it to the group or 1:1 chat in one call (with the turn id that shows a
        typed question's buttons once the card is finished, when the template has them)."""
        out_track_id = f"bg-{uuid.uuid4().hex}"
        params = {self._key: render_card(snapshot, is_group=target.is_group, asker=target.user_name)}
        if self._answer_buttons:
            params.update(answer_params(target))
        body = deliver_body(target, template_id=self._template_id, out_track_id=out_track_id, params=params,
                            robot_code=self._robot_code)
        try:
            answer = await self._api.create_and_deliver(body)
        except RateLimited as exc:
            self._throttled(exc)
            raise
        refused = undelivered(answer)
        if refused is not None:
            # The card exists but nobody sees it, and streaming into it would still succeed:
            # a permanent error makes the streamer send the answer as a markdown message instead.
            raise PermanentError(
                f"DingTalk created the card but could not deliver it to {body['openSpaceId']} ({refused}); "
                "check that the robot is in the group and the app may send cards there"
            )
        carrier = carrier_id(answer)  # kept, so a card nobody asked for can be found again when quoted
        data = {"mode": "card", **({"quote_key": carrier} if carrier else {})}
        return CardHandle(card_id=out_track_id, target=target, data=data)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Replace the card's text with ``snapshot`` (a full, not incremental, streaming update)."""
        if handle.data.get("final"):
            await self._replace(handle, snapshot)
            return handle
        await self._stream(handle, snapshot, finalize=False)
        return await self._sync_approvals(handle, snapshot)

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Last streaming update: ``isFinalize``, and ``isError`` for a failed turn.

        Needs only ``handle.card_id`` (the outTrackId) and ``handle.target``, so a
        card recorded in the Store before a crash can be finalized at start-up.
        The handle returned says the card is final: a card that lives on after
        its stream ended (an alert's, changed by later notifications) is then
        changed through ``PUT /v1.0/card/instances``, as an ended stream takes
        no more writes.
        """
        if handle.data.get("final"):
            await self._replace(handle, snapshot)
            return handle
        await self._stream(handle, snapshot, finalize=True)
        synced = await self._sync_approvals(handle, snapshot)
        return CardHandle(card_id=synced.card_id, target=synced.target, data={**synced.data, "final": True})

    async def _replace(self, handle: CardHandle, snapshot: CardSnapshot) -> None:
        """Change a finalized card's text (its variable), the way DingTalk lets an ended card change."""
        content = render_card(snapshot, is_group=handle.target.is_group, asker=handle.target.user_name)
        body = {"outTrackId": handle.card_id, "cardData": {"cardParamMap": {self._key: content}},
                "cardUpdateOptions": {"updateCardDataByKey": True}}
        try:
            await self._api.update_card(body)
        except RateLimited as exc:
            self._throttled(exc)
            raise

    async def _sync_approvals(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        if self._approvals is None:
            return handle
        return await self._approvals.sync(handle, snapshot)

    async def _stream(self, handle: CardHandle, snapshot: CardSnapshot, *, finalize: bool) -> None:
        content = render_card(snapshot, is_group=handle.target.is_group, asker=handle.target.user_name)
        try:
            await self._api.stream_card(
                handle.card_id, self._key, content, finalize=finalize, error=finalize and snapshot.status == "failed"
            )
        except RateLimited as exc:
            self._throttled(exc)
            raise

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """The card cannot be updated: post the snapshot as a markdown message."""
        await self._sender.send(target, snapshot)
