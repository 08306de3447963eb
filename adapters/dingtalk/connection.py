"""The adapter's way in: Stream mode's connection or the HTTP callback server, whichever ``mode`` picks.

Either way each bot message is handed to the adapter's ``on_message`` at once
(the adapter acks it and works in tasks of its own); in Stream mode a card's
button press goes to ``on_card_action`` when the cards carry buttons that call
back (:func:`card_buttons`). The callback server checks each signed pair with
``first_use``, so a replayed request is refused by every replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from adapters.dingtalk.callback import CallbackServer, FirstUse
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.config import DingTalkConfig

if TYPE_CHECKING:
    from adapters.dingtalk.stream import StreamConnection

__all__ = ["DingTalkConnection", "Receiver", "card_buttons"]

log = structlog.get_logger(__name__)

Receiver = Callable[[dict[str, Any]], None]
"""Takes one payload (a bot message, a card callback) and returns at once."""


def card_buttons(config: DingTalkConfig) -> bool:
    """Whether cards carry buttons that call back (approval cards, a final answer's buttons)."""
    return bool(config.approval_template_id or (config.answer_buttons and config.card_template_id))


class DingTalkConnection:
    """Opens and closes the way DingTalk delivers to the adapter: a Stream connection, or the HTTP callback server."""

    def __init__(
        self,
        config: DingTalkConfig,
        api: DingTalkOpenAPI,
        *,
        on_message: Receiver,
        on_card_action: Receiver,
        first_use: FirstUse,
        clock: Callable[[], float] = time.time,
        reuse_port: bool = False,
    ) -> None:
        """``api``: the OpenAPI client whose session Stream mode opens its connection with (closed when the app's
        id or secret is refused); ``first_use``: whether a callback's signed pair is new (see
        :class:`~adapters.dingtalk.callback.CallbackServer`); ``reuse_port`` binds the callback's port with
        ``SO_REUSEPORT`` (worker processes share it)."""
        self._config = config
        self._api = api
        self._on_message = on_message
        self._on_card_action = on_card_action
        self._first_use = first_use
        self._clock = clock
        self._reuse_port = reuse_port
        self._stream: StreamConnection | None = None
        self._callback: CallbackServer | None = None

    @property
    def stream(self) -> StreamConnection | None:
        """The stream connection (Stream mode, once started)."""
        return self._stream

    @property
    def callback_server(self) -> CallbackServer | None:
        """The callback server (HTTP mode, once started)."""
        return self._callback

    @property
    def connected(self) -> bool:
        """Whether DingTalk can deliver to us now: the stream is connected, or the callback server listens."""
        if self._stream is not None:
            return self._stream.connected.is_set()
        return self._callback is not None and self._callback.listening

    async def start(self) -> None:
        """Listen for callbacks (``mode: http``) or connect the stream (otherwise); a refused app id or secret
        raises :class:`ValueError`."""
        if self._config.mode == "http":
            await self._start_callback()
        else:
            await self._start_stream()

    async def stop(self) -> None:
        """Close the stream connection, or stop listening for callbacks. Idempotent."""
        if self._stream is not None:
            await self._stream.stop()
        if self._callback is not None:
            await self._callback.stop()

    async def _start_callback(self) -> None:
        self._callback = CallbackServer(
            secret=self._config.client_secret.get_secret_value(),
            on_message=self._on_callback,
            first_use=self._first_use,
            max_skew_s=self._config.callback_max_skew_s,
            host=self._config.http_host,
            port=self._config.http_port,
            path=self._config.http_path,
            clock=self._clock,
            reuse_port=self._reuse_port,
        )
        await self._callback.start()

    async def _start_stream(self) -> None:
        from dingtalk_stream import Credential  # the SDK is only needed in Stream mode

        from adapters.dingtalk.stream import StreamConnection

        self._stream = StreamConnection(
            Credential(self._config.client_id, self._config.client_secret.get_secret_value()),
            self._on_message,
            api_base_url=self._config.api_base_url,
            session=self._api.session(),
            on_card_action=self._on_card_action if card_buttons(self._config) else None,
        )
        # A refused app id/secret fails the start with a plain reason; a network
        # problem does not (the connection keeps retrying in the background).
        first: dict[str, Any] | None = None
        try:
            first = await self._stream.open_connection_async()
        except PermissionError as exc:
            await self._api.aclose()
            raise ValueError(str(exc)) from None
        except ConnectionError as exc:
            log.warning("dingtalk.stream_unreachable", detail=str(exc))
        self._stream.run_in_background(first)

    async def _on_callback(self, data: dict[str, Any]) -> None:
        self._on_message(data)
