"""The web adapter: the third front door, the HTTP API (and the console) on the gateway's own HTTP server.

Built by the composition root before the HTTP server starts, so that its
routes are mounted (:meth:`WebAdapter.mount`); it takes questions once ``run``
starts it with the gateway, and stops taking them when the process drains
(``503``), while the streams of the turns in progress go on. It is
"connected" while it takes questions, which ``/readyz`` counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adapters.web.app import API_PREFIX, api_app
from adapters.web.artifact_routes import PICTURES
from adapters.web.auth import SessionCheck
from adapters.web.console_answers import WEB_FRONT
from adapters.web.front import ApiStore, BusyElsewhere, HistorySeed, WebFront
from adapters.web.sink import WebSink
from botgateway.config import Config
from botgateway.tooling import ToolRegistry

__all__ = ["WebAdapter"]


class WebAdapter:
    """The HTTP API's adapter (an :class:`~botgateway.sink.Adapter`)."""

    name = "web"

    def __init__(
        self, config: Config, *, store: ApiStore, tools: ToolRegistry, clear: Callable[[str], Awaitable[None]],
        session: SessionCheck | None = None, busy_elsewhere: BusyElsewhere | None = None,
        seed: HistorySeed | None = None,
    ) -> None:
        """``clear`` forgets a conversation's history (the memory's); ``session`` checks a console session's cookie
        (default: :func:`adapters.web.session.session_principal`); ``busy_elsewhere`` names the other processes of
        the fleet running a conversation's turns (None: no fleet); ``seed`` writes a turn into a conversation's
        history (the memory's ``commit``: an OpenAI client's earlier messages; None: they are not kept)."""
        if session is None:
            from adapters.web.session import session_principal

            session = session_principal
        self.sink = WebSink()
        """The cards of the API's turns (each turn's newest snapshot)."""
        self.front = WebFront(config, sink=self.sink, store=store, tools=tools, clear=clear,
                              busy_elsewhere=busy_elsewhere, seed=seed)
        """What the routes share: the gateway (once started), the sink, the Store, the tools."""
        self._session = session

    def mount(self, app: web.Application) -> None:
        """Serve the API at ``/v1`` on ``app`` (the gateway's HTTP server's, before it starts), and keep the
        turns' pictures and the front where the console's routes find them."""
        app[PICTURES] = self.sink.shelf
        app[WEB_FRONT] = self.front
        app.add_subapp(API_PREFIX, api_app(self.front, self._session))

    @property
    def connected(self) -> bool:
        """Whether it takes questions now."""
        return self.front.receiving

    async def start(self, gateway: Any) -> None:
        """Take questions for ``gateway``."""
        self.front.gateway = gateway
        self.front.receiving = True

    async def stop_receiving(self) -> None:
        """Take no new questions (503); the streams of the turns in progress go on."""
        self.front.receiving = False

    async def stop(self) -> None:
        """Take no questions (the HTTP server, closed by the runtime, ends the open streams)."""
        self.front.receiving = False
