"""The fake DingTalk's card OpenAPI: ``createAndDeliver``, ``PUT /v1.0/card/streaming``, ``PUT /v1.0/card/instances``.

:class:`FakeCard` is one card instance as the fake knows it. :class:`DingTalkCardAPI`
is the part of :class:`~tests.fakes.dingtalk.FakeDingTalk` that validates the
card calls' bodies like DingTalk, keeps each card's state (its streamed
content, variables, whether it was delivered and finalized), can hold card
calls on their way as a stalled network does, and reads back the card calls
and the cards of a conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.dingtalk_calls import Call

__all__ = ["CARD_PATHS", "DingTalkCardAPI", "FakeCard"]

CARD_PATHS = ("/v1.0/card/instances/createAndDeliver", "/v1.0/card/streaming", "/v1.0/card/instances")
"""The card APIs' paths (they share one QPS limit)."""


@dataclass
class FakeCard:
    """One card instance as the fake knows it."""

    out_track_id: str
    create_body: dict[str, Any]
    content: str
    """Current value of the streaming key (cardParamMap value at create)."""
    updates: list[dict[str, Any]] = field(default_factory=list)
    """Accepted streaming bodies, in order."""
    finalized: bool = False
    """An ``isFinalize`` update was accepted."""
    error: bool = False
    """The final update carried ``isError``."""
    delivered: bool = True
    """False when ``createAndDeliver`` reported the delivery as failed (nobody sees the card)."""
    params: dict[str, str] = field(default_factory=dict)
    """The card's variables: ``cardParamMap`` at create, changed by ``PUT /v1.0/card/instances``."""

    @property
    def space_id(self) -> str:
        """The ``openSpaceId`` the card was delivered to."""
        return str(self.create_body.get("openSpaceId", ""))


class DingTalkCardAPI:
    """Card instances and the card APIs (a mixin of :class:`~tests.fakes.dingtalk.FakeDingTalk`)."""

    calls: list[Call]
    cards: dict[str, FakeCard]
    undeliverable_spaces: set[str]
    _arrivals_open: asyncio.Event | None
    _begin: Callable[..., Awaitable[tuple[Call, web.Response | None]]]
    _bad_request: Callable[[Call, dict[str, Any]], Awaitable[web.Response]]
    _notify: Callable[[], Awaitable[None]]
    _tell_watchers: Callable[[Any, str], None]

    def card_calls(self) -> list[Call]:
        """Every call that reached a card API (accepted or throttled)."""
        return [c for c in self.calls if c.path in CARD_PATHS]

    def max_card_calls_per_second(self) -> int:
        """Most card API calls that arrived within any sliding 1-second window."""
        times = sorted(c.at for c in self.card_calls())
        best, start = 0, 0
        for end, t in enumerate(times):
            while t - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    def throttled(self) -> int:
        """Card calls answered with a throttle (403 QpsLimit or 429)."""
        return sum(1 for c in self.card_calls() if c.status in (403, 429))

    def cards_in(self, space_id: str) -> list[FakeCard]:
        """Cards delivered to ``space_id`` (``dtv1.card//IM_GROUP.cid…``), in creation order."""
        return [c for c in self.cards.values() if c.space_id == space_id]

    def hold_arrivals(self) -> None:
        """Hold card calls on their way, as a stalled network does, until :meth:`release_arrivals`: they arrive
        (and count against the QPS limit) together then."""
        self._arrivals_open = asyncio.Event()

    async def release_arrivals(self) -> None:
        """Let the held card calls arrive, all at once."""
        if self._arrivals_open is not None:
            self._arrivals_open.set()
            self._arrivals_open = None

    async def _create_and_deliver(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        problems = [k for k in ("cardTemplateId", "outTrackId", "openSpaceId") if not body.get(k)]
        space = str(body.get("openSpaceId", ""))
        param_map = (body.get("cardData") or {}).get("cardParamMap")
        if not isinstance(param_map, dict) or not all(isinstance(v, str) for v in param_map.values()):
            problems.append("cardData.cardParamMap (string values)")
        problems += _delivery_problems(body, space)
        if body.get("outTrackId") in self.cards:
            return await self._bad_request(call, {"code": "param.outTrackIdExists", "message": "outTrackId already used"})
        if problems:
            return await self._bad_request(call, {"code": "invalidParameter", "message": "missing " + ", ".join(problems)})
        card = FakeCard(body["outTrackId"], body, content=next(iter(param_map.values()), ""), params=dict(param_map))
        self.cards[card.out_track_id] = card
        self._tell_watchers(card, "create")
        await self._notify()
        if space in self.undeliverable_spaces:
            # Like DingTalk: HTTP 200, the instance exists, only the delivery result says it failed.
            card.delivered = False
            delivery = {"spaceId": space, "spaceType": "IM_GROUP", "success": False, "errorMsg": "机器人不在群内"}
        else:
            delivery = {"spaceId": space, "success": True, "carrierId": f"c{len(self.cards)}"}
        return web.json_response({"success": True, "result": {"outTrackId": card.out_track_id, "deliverResults": [delivery]}})

    async def _update_card(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        card = self.cards.get(body.get("outTrackId", ""))
        params = (body.get("cardData") or {}).get("cardParamMap")
        if card is None or not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            return await self._bad_request(call, {"code": "invalidParameter", "message": "unknown card or bad cardParamMap"})
        card.params.update(params)
        key = str(card.updates[-1].get("key")) if card.updates else "content"
        if key in params:
            card.content = params[key]  # the streamed variable, changed after its stream ended
        self._tell_watchers(card, "update")
        await self._notify()
        return web.json_response({"success": True, "result": True})

    async def _streaming(self, request: web.Request) -> web.Response:
        call, failed = await self._begin(request, card=True)
        if failed is not None:
            await self._notify()
            return failed
        body = call.body
        card = self.cards.get(body.get("outTrackId", ""))
        if card is None:
            return await self._bad_request(call, {"code": "param.cardNotExist", "message": "card instance does not exist"})
        missing = [k for k in ("guid", "key") if not body.get(k)] + [k for k in ("isFull", "isFinalize", "isError") if not isinstance(body.get(k), bool)]
        if missing or not isinstance(body.get("content"), str):
            return await self._bad_request(call, {"code": "invalidParameter", "message": "bad " + ", ".join(missing or ["content"])})
        if card.finalized:
            return await self._bad_request(call, {"code": "card.streamingFinished", "message": "streaming already finalized"})
        card.updates.append(body)
        card.content = body["content"] if body["isFull"] else card.content + body["content"]
        card.finalized = body["isFinalize"]
        card.error = body["isError"]
        self._tell_watchers(card, "stream")
        await self._notify()
        return web.json_response({"success": True, "result": True})


def _delivery_problems(body: dict[str, Any], space: str) -> list[str]:
    """What the deliver model for ``space`` (a group or a robot's 1:1 chat) lacks, as ``createAndDeliver`` checks it."""
    if space.startswith("dtv1.card//IM_GROUP."):
        return [] if (body.get("imGroupOpenDeliverModel") or {}).get("robotCode") else ["imGroupOpenDeliverModel.robotCode"]
    if space.startswith("dtv1.card//IM_ROBOT."):
        ok = (body.get("imRobotOpenDeliverModel") or {}).get("spaceType") == "IM_ROBOT"
        return [] if ok else ["imRobotOpenDeliverModel.spaceType"]
    return ["openSpaceId"]
