"""``GET /v1/models`` and ``GET /v1/models/{id}``: the gateway as the one model an OpenAI client can pick.

Open WebUI, LibreChat, Chatbox and LobeChat list a server's models before
they let anyone ask (``models.list()``), and some look one up
(``models.retrieve(id)``): the list is OpenAI's (``{"object": "list",
"data": [{"id", "object": "model", "created", "owned_by"}]}``) with one
model, :data:`MODEL_ID`, the name ``POST /v1/chat/completions`` answers as when
a request names none. That route still takes any ``model`` (a client's
configured name is echoed back); only a lookup of another id is a 404
(``model_not_found``). Both need the API's key, as every ``/v1`` route does.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from adapters.web.api_errors import BadRequest

__all__ = ["MODEL_ID", "OWNER", "model_card", "model_routes"]

MODEL_ID = "botgateway"
"""The model's id: what ``/v1/models`` lists and what a completion that names no model answers as."""
OWNER = "botgateway"
"""Its ``owned_by``."""


def model_routes() -> list[web.RouteDef]:
    """The two routes (relative to the ``/v1`` sub-application); ``created`` is when this process built them."""
    card = model_card(int(time.time()))

    async def listed(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [card]})

    async def one(request: web.Request) -> web.Response:
        model_id = request.match_info["model"]
        if model_id != MODEL_ID:
            raise BadRequest(f"the model {model_id!r} does not exist; this gateway serves {MODEL_ID!r}", 404,
                             code="model_not_found", param="model")
        return web.json_response(card)

    # Any id, slashes too (``org/name`` is a model id elsewhere): an unknown one is a model not found, not a route.
    return [web.get("/models", listed), web.get("/models/{model:.+}", one)]


def model_card(created: int) -> dict[str, Any]:
    """The model as ``/v1/models`` lists it."""
    return {"id": MODEL_ID, "object": "model", "created": created, "owned_by": OWNER}
