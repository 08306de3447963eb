"""The fleet's control channel: requests to the process that holds a turn, and their answers, over Redis pub/sub.

One channel per key prefix (``<prefix>fleet:control``) carries every request
and notice; each message names the process it is for (``to``; empty for a
notice to all, such as "this conversation's lease is free"). A request that
wants an answer names its sender; the answer goes to the sender's own reply
channel (``<prefix>fleet:reply:<instance id>``) and is awaited for a short
time (:data:`REPLY_TIMEOUT_S`): a process that does not answer by then is
reported as unreachable, never waited for.

Request/response was chosen over "the owner tells the requester through its
own sinks": the answer (stopped, not yours, already finished, vote refused)
belongs where the request came in, in the form the receiving adapter gives it
(an ephemeral note to the presser of that button, a private 1:1 note), and only
that adapter holds the platform context to give it.

Pub/sub delivers only to processes listening at that moment, which is what is
wanted: a request is for a live process, and a process that is gone has no
turn left to stop. The subscriber runs in its own task (a
:class:`~botgateway.background.BackgroundTasks`), and reconnects after a lost
connection with the core :class:`~botgateway.backoff.Backoff`, logging the
outage once. Anyone who can write to the Redis can send requests, as they can
rewrite the history: the store's access control is the fleet's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

import redis.asyncio as aioredis
import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff

__all__ = [
    "RECONNECT_BACKOFF",
    "REPLY_TIMEOUT_S",
    "ControlChannel",
    "Handler",
    "control_channel",
    "notice",
]

log = structlog.get_logger(__name__)

REPLY_TIMEOUT_S = 2.0
"""How long a request waits for its answer; a live process answers in milliseconds."""
RECONNECT_BACKOFF = Backoff(base_s=0.1, max_s=5.0)
"""Pacing of the subscriber's reconnections."""
_POLL_S = 1.0
"""Longest blocking read: keeps the connection's health checks (PING) going while nothing is published."""

Handler: TypeAlias = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any] | None]]
"""Answers one request's body (``None``: nothing to answer, as for a notice)."""


def control_channel(prefix: str) -> str:
    """The channel every process of the prefix listens to."""
    return f"{prefix}fleet:control"


def _reply_channel(prefix: str, instance_id: str) -> str:
    return f"{prefix}fleet:reply:{instance_id}"


def notice(kind: str, body: Mapping[str, Any], *, sender: str) -> str:
    """A message for every process (no answer wanted), as published on :func:`control_channel`."""
    return json.dumps({"kind": kind, "from": sender, "to": "", "id": "", "body": dict(body)})


class ControlChannel:
    """This process's end of the control channel: it answers requests for it and asks the others.

    Args:
        client: A Redis client (the subscriber takes one connection of its pool for itself).
        prefix: The deployment's key prefix (one channel per prefix).
        instance_id: This process's id: requests ``to`` it are answered here.
        reply_timeout_s: How long :meth:`ask` waits for an answer.
        backoff: Pacing of reconnections after a lost connection.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        instance_id: str,
        *,
        reply_timeout_s: float = REPLY_TIMEOUT_S,
        backoff: Backoff = RECONNECT_BACKOFF,
    ) -> None:
        self.instance_id = instance_id
        """Requests addressed to this id are answered here."""
        self._redis = client
        self._channel = control_channel(prefix)
        self._replies = _reply_channel(prefix, instance_id)
        self._prefix = prefix
        self._reply_timeout_s = reply_timeout_s
        self._backoff = backoff
        self._handlers: dict[str, Handler] = {}
        self._waiting: dict[str, asyncio.Future[Mapping[str, Any]]] = {}
        self._listening = asyncio.Event()
        self._subscriber: asyncio.Task[None] | None = None
        self._tasks = BackgroundTasks()
        """The subscriber, and the requests being answered."""

    @property
    def listening(self) -> bool:
        """Whether requests reach this process now (subscribed, not between reconnections)."""
        return self._listening.is_set()

    def on(self, kind: str, handler: Handler) -> None:
        """Answer requests (and notices) of ``kind`` with ``handler``."""
        self._handlers[kind] = handler

    async def start(self, timeout_s: float = 5.0) -> bool:
        """Start listening; True once subscribed, False if not within ``timeout_s`` (it keeps trying) or closed."""
        if self._subscriber is None:
            self._subscriber = self._tasks.spawn(self._listen(), name=f"fleet-control-{self.instance_id[:8]}")
        if self._subscriber is None or self._subscriber.done():
            return False  # closed
        try:
            await asyncio.wait_for(self._listening.wait(), timeout_s)
        except TimeoutError:
            log.warning("fleet.control_not_listening", timeout_s=timeout_s,
                        note="stops and approval decisions from other processes wait until it is")
            return False
        return True

    async def ask(self, instance_id: str, kind: str, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Send a request to ``instance_id``; its answer, or ``None`` when none came in time (or none could)."""
        if not self.listening:
            return None  # its answer could not reach us
        request_id = uuid.uuid4().hex
        answer: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        message = json.dumps(
            {"kind": kind, "from": self.instance_id, "to": instance_id, "id": request_id, "body": dict(body)}
        )
        try:
            async with asyncio.timeout(self._reply_timeout_s):
                if not await self._redis.publish(self._channel, message):
                    return None  # nobody listens (a process that is gone)
                return await answer
        except TimeoutError:
            log.warning("fleet.no_answer", to=instance_id, kind=kind, timeout_s=self._reply_timeout_s)
            return None
        except Exception as exc:  # Redis unreachable: the caller answers "unreachable"
            log.warning("fleet.ask_failed", to=instance_id, kind=kind, error=type(exc).__name__)
            return None
        finally:
            self._waiting.pop(request_id, None)

    async def aclose(self) -> None:
        """Stop listening; requests being answered are cancelled."""
        self._listening.clear()
        await self._tasks.aclose()

    async def _listen(self) -> None:
        """Subscribe, dispatch, and after a lost connection subscribe again (backing off, logged once per outage)."""
        failures = 0
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel, self._replies)
                await self._confirmed(pubsub, 2)
                self._listening.set()
                if failures:
                    log.info("fleet.control_restored", after_attempts=failures)
                failures = 0
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=_POLL_S)
                    if message is not None:
                        self._dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:
                    log.warning("fleet.control_lost", error=type(exc).__name__, detail=str(exc)[:200],
                                note="reconnecting; stops and decisions from other processes wait until then")
            finally:
                self._listening.clear()
                await _close_quietly(pubsub)
            await asyncio.sleep(self._backoff.delay(failures - 1))

    async def _confirmed(self, pubsub: Any, channels: int) -> None:
        """Wait for the server's confirmation of each subscription: only then are messages published to us."""
        seen = 0
        while seen < channels:
            message = await pubsub.get_message(timeout=_POLL_S)
            if message is None:
                continue
            if message.get("type") == "subscribe":
                seen += 1
            else:
                self._dispatch(message)

    def _dispatch(self, message: Mapping[str, Any]) -> None:
        """Hand one message to its waiter (an answer) or its handler (a request or notice for this process)."""
        try:
            data = json.loads(message["data"])
            channel = message["channel"]
            channel = channel.decode() if isinstance(channel, bytes) else channel
            if channel == self._replies:
                waiter = self._waiting.get(str(data["id"]))
                if waiter is not None and not waiter.done():
                    waiter.set_result(dict(data["body"]))
                return
            to, kind = str(data.get("to") or ""), str(data["kind"])
            if to and to != self.instance_id:
                return
            handler = self._handlers.get(kind)
            if handler is not None:
                self._tasks.spawn(self._answer(handler, data), name=f"fleet-{kind}")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("fleet.bad_message", error=type(exc).__name__)

    async def _answer(self, handler: Handler, request: Mapping[str, Any]) -> None:
        """Run ``handler`` and publish its answer to the sender's reply channel (when the request has an id)."""
        try:
            body = await handler(request.get("body") or {})
            if body is None or not request.get("id"):
                return
            reply = json.dumps({"id": request["id"], "body": dict(body)})
            await self._redis.publish(_reply_channel(self._prefix, str(request["from"])), reply)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the asker times out and says so; nothing else depends on it
            log.warning("fleet.answer_failed", kind=request.get("kind"), error=type(exc).__name__)


async def _close_quietly(pubsub: Any) -> None:
    """Release the subscriber's connection, whatever state it is in."""
    try:
        await pubsub.aclose()
    except Exception:  # a broken connection is closed anyway
        pass
