"""The fleet's queue of moved questions on Redis: a stream per platform, read through a consumer group.

Under the deployment's prefix, ``fleet:moved:<platform>`` is a Redis stream.
Each entry is one conversation's waiting questions, in their order (field
``questions``: a JSON list of :func:`~botgateway.fleet.wire.moved_to_wire`), so
the process that takes it schedules them together and keeps their order.

Every process serving the platform reads the stream in the consumer group
``gateway`` as the consumer named after its instance id (``XREADGROUP``): an
entry goes to one process and stays pending under its name until that process
has handed its questions to its gateway, then is acknowledged and deleted
(``XACK``, ``XDEL``). Nothing is lost when a process holding one stops:

- a process that is no longer live (its heartbeats: the rule recovery uses
  for open cards) leaves its pending entries to the others, which claim them in
  a script that checks the entry is still that process's (``XPENDING`` then
  ``XCLAIM``), so two never take the same one;
- a process restarted under its stable id first takes what it held before;
- a process that stops serving (it drains) puts back on the stream what it
  read and did not hand on.

Entries nobody takes wait in the stream (the whole fleet restarting at once):
the next process to serve the platform takes them, and its gateway judges
their age (``gateway.handoff_max_age_s``). The group is created at the stream's
start, so entries written before any process served are read too. Reading
blocks at most :data:`BLOCK_S` at a time, and after a lost connection the
reader comes back with the core :class:`~botgateway.backoff.Backoff`, logging
the outage once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import ResponseError
from redis.typing import EncodableT, FieldT

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.fleet.control import RECONNECT_BACKOFF
from botgateway.fleet.handoff import MovedQuestion, TakeMoved
from botgateway.fleet.wire import moved_from_wire, moved_to_wire

__all__ = ["BLOCK_S", "GROUP", "MAX_ENTRIES", "PUT_TIMEOUT_S", "RedisHandoff", "moved_stream"]

log = structlog.get_logger(__name__)

GROUP = "gateway"
"""The consumer group every process reads in."""
BLOCK_S = 2.0
"""Longest blocking read; between reads a process looks for entries held by processes that are gone."""
PUT_TIMEOUT_S = 5.0
"""Longest wait for the stream to take a move; past it the questions stay and wait here (should the write land
after all, one may be answered twice: better than not at all)."""
MAX_ENTRIES = 10_000
"""A stream keeps at most about this many entries (a backstop: taken entries are deleted)."""
_BATCH = 10
"""Entries read or claimed at once."""

# KEYS: the stream. ARGV: group, the consumer the entry must still be pending with, entry id, new consumer.
# Returns 1 when claimed, 0 when another process claimed it first (or it is gone).
_CLAIM = """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if pending[1] == nil or pending[1][2] ~= ARGV[2] then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[4], 0, ARGV[3], 'JUSTID')
return 1
"""

# KEYS: the stream. ARGV: group, consumer. Drops the consumer only while it holds nothing (dropping one drops what
# it holds, and a process restarted under its id may be reading again).
_FORGET = """
if redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])[1] == nil then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
"""


def moved_stream(prefix: str, platform: str) -> str:
    """The stream of the questions of ``platform`` moved by draining processes."""
    return f"{prefix}fleet:moved:{platform}"


class RedisHandoff:
    """:class:`~botgateway.fleet.handoff.Handoff` on Redis streams.

    Args:
        client: A Redis client (the reader holds one of its connections while it blocks).
        prefix: The deployment's key prefix.
        instance_id: This process's id: its consumer name in the group.
        live: The ids of the live processes (the store's heartbeats).
        block_s: Longest blocking read.
        backoff: Pacing of the reader's retries after a failure.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        instance_id: str,
        *,
        live: Callable[[], Awaitable[set[str]]],
        block_s: float = BLOCK_S,
        backoff: Backoff = RECONNECT_BACKOFF,
    ) -> None:
        self.instance_id = instance_id
        """This process's id (its consumer name)."""
        self._redis = client
        self._prefix = prefix
        self._live = live
        self._block_ms = max(1, int(block_s * 1000))
        self._backoff = backoff
        self._claim = client.register_script(_CLAIM)
        self._forget = client.register_script(_FORGET)
        self._platforms: frozenset[str] = frozenset()
        self._stopping = False
        self._idle = False
        """The reader waits (a blocking read, or a pause after a failure): cancelling it loses nothing that
        :meth:`stop_serving` cannot put back."""
        self._reader: asyncio.Task[None] | None = None
        self._tasks = BackgroundTasks()
        """The reader."""

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms this process takes moved questions of (none until :meth:`serve`); kept once it stops."""
        return self._platforms

    # --- the draining side ------------------------------------------------------------------

    async def put(self, questions: Sequence[MovedQuestion]) -> bool:
        """One conversation's waiting questions as one entry of their platform's stream; False (logged) on failure."""
        if not questions:
            return True
        first = questions[0]
        stream = moved_stream(self._prefix, first.msg.platform)
        try:
            body = json.dumps([moved_to_wire(q) for q in questions], ensure_ascii=False, separators=(",", ":"))
            async with asyncio.timeout(PUT_TIMEOUT_S):
                await self._redis.xadd(stream, {"questions": body}, maxlen=MAX_ENTRIES, approximate=True)
        except Exception as exc:  # TimeoutError included
            log.warning("fleet.move_failed", conversation=first.msg.conversation_id, questions=len(questions),
                        error=type(exc).__name__, detail=str(exc)[:200],
                        note="these questions stay here: answered while draining, or stopped with the restart note")
            return False
        log.info("fleet.moved", conversation=first.msg.conversation_id, turns=[q.turn_id for q in questions])
        return True

    # --- the taking side ---------------------------------------------------------------------

    def serve(self, platforms: Collection[str], take: TakeMoved) -> None:
        """Take the moved questions of ``platforms`` from now on, each handed to ``take`` (in the background)."""
        if self._reader is not None or self._stopping or not platforms:
            return
        self._platforms = frozenset(platforms)
        streams = [moved_stream(self._prefix, platform) for platform in sorted(self._platforms)]
        self._reader = self._tasks.spawn(self._read_loop(streams, take), name="fleet-moved-reader")

    async def stop_serving(self) -> None:
        """Take no more; the question being handed on is handed first; what was read and not handed on goes back."""
        if self._stopping:
            return
        self._stopping = True
        reader = self._reader
        if reader is None:
            return
        if self._idle:
            reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        streams = [moved_stream(self._prefix, platform) for platform in sorted(self._platforms)]
        for stream in streams:
            await self._give_back(stream)

    async def aclose(self) -> None:
        """Stop serving (see :meth:`stop_serving`) and end the reader."""
        await self.stop_serving()
        await self._tasks.aclose()

    async def _read_loop(self, streams: list[str], take: TakeMoved) -> None:
        """Claim the entries of processes that are gone, take this process's pending ones, then wait for new ones."""
        failures = 0
        ready = False
        while not self._stopping:
            try:
                if not ready:
                    for stream in streams:
                        await self._ensure_group(stream)
                    ready = True
                for stream in streams:
                    await self._claim_orphans(stream)
                entries = await self._read(streams, "0", block=False)  # claimed, or held before a restart
                if not entries and not self._stopping:
                    entries = await self._read(streams, ">", block=True)
                if failures:
                    log.info("fleet.moved_reader_restored", after_attempts=failures)
                failures = 0
                for stream, entry_id, fields in entries:
                    if self._stopping:
                        break  # put back by stop_serving
                    await self._hand_on(stream, entry_id, fields, take)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1:
                    log.warning("fleet.moved_reader_failed", error=type(exc).__name__, detail=str(exc)[:200],
                                note="retrying; questions moved by draining processes wait in Redis until then")
                await self._pause(self._backoff.delay(failures - 1))

    async def _pause(self, delay_s: float) -> None:
        self._idle = True
        try:
            await asyncio.sleep(delay_s)
        finally:
            self._idle = False

    async def _ensure_group(self, stream: str) -> None:
        try:
            await self._redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read(self, streams: list[str], start: str, *, block: bool) -> list[tuple[str, str, dict[str, Any]]]:
        """Entries of ``streams`` from ``start`` (``0``: this consumer's pending ones; ``>``: new ones)."""
        self._idle = block
        try:
            reply = await self._redis.xreadgroup(GROUP, self.instance_id, {s: start for s in streams}, count=_BATCH,
                                                 block=self._block_ms if block else None)
        finally:
            self._idle = False
        return list(_entries(reply))

    async def _hand_on(self, stream: str, entry_id: str, fields: Mapping[str, Any] | None, take: TakeMoved) -> None:
        """Hand the entry's questions to ``take`` in their order, then acknowledge and delete it."""
        questions: list[MovedQuestion] = []
        try:
            questions = [moved_from_wire(item) for item in json.loads((fields or {})["questions"])]
        except (ValueError, TypeError, KeyError) as exc:  # never taken again: it would fail again
            log.warning("fleet.moved_unreadable", stream=stream, entry=entry_id, error=type(exc).__name__)
        for moved in questions:
            log.info("fleet.moved_taken", turn_id=moved.turn_id, conversation=moved.msg.conversation_id,
                     moved_by=moved.moved_by, age_s=round(time.time() - moved.moved_at, 3))
            try:
                await take(moved)
            except Exception as exc:  # the others of the entry still go on
                log.exception("fleet.moved_take_failed", turn_id=moved.turn_id, error=type(exc).__name__)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(stream, GROUP, entry_id)
            pipe.xdel(stream, entry_id)
            await pipe.execute()

    async def _claim_orphans(self, stream: str) -> None:
        """Make this process the holder of the pending entries of consumers that are no longer live."""
        summary = await self._redis.xpending(stream, GROUP)
        holders = {str(c["name"]) for c in summary.get("consumers") or () if int(c["pending"]) > 0}
        holders.discard(self.instance_id)
        if not holders:
            return
        gone = holders - await self._live()
        for holder in sorted(gone):
            rows = await self._redis.xpending_range(stream, GROUP, min="-", max="+", count=_BATCH, consumername=holder)
            claimed = 0
            for row in rows:
                args = [GROUP, holder, row["message_id"], self.instance_id]
                claimed += int(await self._claim(keys=[stream], args=args))
            if claimed:
                log.info("fleet.moved_claimed", stream=stream, holder=holder, entries=claimed)
            if len(rows) < _BATCH:
                await self._forget_consumer(stream, holder)

    async def _give_back(self, stream: str) -> None:
        """Put the entries this process read and did not hand on back on the stream, for another process."""
        try:
            reply = await self._redis.xreadgroup(GROUP, self.instance_id, {stream: "0"}, count=MAX_ENTRIES)
            given = 0
            for _stream, entry_id, fields in _entries(reply):
                async with self._redis.pipeline(transaction=True) as pipe:
                    if fields:
                        # Built under redis's own key type: its dict is invariant, so a dict of str keys is refused.
                        entry: dict[FieldT, EncodableT] = {field: value for field, value in fields.items()}
                        pipe.xadd(stream, entry, maxlen=MAX_ENTRIES, approximate=True)
                    pipe.xack(stream, GROUP, entry_id)
                    pipe.xdel(stream, entry_id)
                    await pipe.execute()
                given += 1
            if given:
                log.info("fleet.moved_given_back", stream=stream, entries=given)
            await self._forget_consumer(stream, self.instance_id)
        except Exception as exc:  # they stay pending under this id: the others claim them once it is gone
            log.warning("fleet.moved_give_back_failed", stream=stream, error=type(exc).__name__)

    async def _forget_consumer(self, stream: str, consumer: str) -> None:
        """Drop a consumer that holds nothing (instance ids of past pods would pile up in the group)."""
        await self._forget(keys=[stream], args=[GROUP, consumer])


def _entries(reply: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """``(stream, entry id, fields)`` of an ``XREADGROUP`` reply (fields empty for an entry deleted while pending)."""
    if not reply:
        return []
    if isinstance(reply, Mapping):  # RESP3: {stream: [entries]}
        groups = [(stream, batches[0] if batches else []) for stream, batches in reply.items()]
    else:  # RESP2: [[stream, entries], ...]
        groups = [(stream, entries) for stream, entries in reply]
    return [(str(stream), str(entry_id), dict(fields or {}))
            for stream, entries in groups for entry_id, fields in entries]
