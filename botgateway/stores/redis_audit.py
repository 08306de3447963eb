"""The audit in Redis: the STREAM ``audit`` (one record per finished turn) and each running turn's tool calls.

- ``audit`` — STREAM of audit records (capped, approximately, at ``max_len``);
- ``tool_calls:{<turn id>}`` — HASH ``call_id:phase`` → tool-call row JSON, until the turn's audit record;
- ``tool_calls`` — ZSET of the turns with such rows → time of their last row (capped at ``max_len``).

Stream ids start with the entry's time in ms, so the retention trims by id.
:class:`~botgateway.stores.redis.RedisStore` delegates here.
"""

from __future__ import annotations

import json
import time

import redis.asyncio as aioredis

from botgateway.stores._codec import audit_from_dict, audit_to_dict, decode_tool_call, dumps, encode_tool_call
from botgateway.stores._unfinished import merged, unfinished_records
from botgateway.stores.base import AuditRecord, ToolCallRow

__all__ = ["RedisAudit"]

_PAGE = 200
"""Turns (or records) read per round trip."""


class RedisAudit:
    """Audit records and tool-call rows under ``prefix``.

    Args:
        redis: The store's client.
        prefix: The deployment's key prefix.
        max_len: Approximate cap on the records (and on the turns with tool-call rows).
        retention_s: Records and rows older than this are trimmed as records are written; ``None`` keeps them.
        rows_ttl_ms: A turn's tool-call rows expire after this (the history's TTL; 0: they do not).
    """

    def __init__(
        self, redis: aioredis.Redis, prefix: str, *, max_len: int, retention_s: float | None, rows_ttl_ms: int
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._max_len = max_len
        self._retention_s = retention_s
        self._rows_ttl_ms = rows_ttl_ms

    def _audit_key(self) -> str:
        return f"{self._prefix}audit"

    def _calls_key(self, turn_id: str | None = None) -> str:
        return f"{self._prefix}tool_calls" if turn_id is None else f"{self._prefix}tool_calls:{{{turn_id}}}"

    async def record_tool_call(self, row: ToolCallRow) -> None:
        """Write one tool call's start or end; kept until the turn's :meth:`record_audit`."""
        calls = self._calls_key(row.turn_id)
        # Not one transaction: the turn's key and the index live in different cluster slots;
        # an index entry whose rows are gone reads as nothing.
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(calls, f"{row.call_id}:{row.phase}", encode_tool_call(row))
            if self._rows_ttl_ms:
                pipe.pexpire(calls, self._rows_ttl_ms)
            pipe.zadd(self._calls_key(), {row.turn_id: row.at})
            pipe.zremrangebyrank(self._calls_key(), 0, -self._max_len - 1)
            await pipe.execute()

    async def record_audit(self, record: AuditRecord) -> None:
        """Append an audit record, then drop the turn's tool-call rows (the record holds its calls)."""
        await self._redis.xadd(
            self._audit_key(),
            {"record": dumps(audit_to_dict(record)), "conversation_id": record.conversation_id},
            maxlen=self._max_len,
            approximate=True,
        )
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.delete(self._calls_key(record.turn_id))
            pipe.zrem(self._calls_key(), record.turn_id)
            if self._retention_s is not None:
                # Stream ids start with the entry's time in ms: everything before the cutoff is older.
                expired = time.time() - self._retention_s
                pipe.xtrim(self._audit_key(), minid=str(int(expired * 1000)), approximate=False)
                pipe.zremrangebyscore(self._calls_key(), "-inf", expired)
            await pipe.execute()

    async def records(self, conversation_id: str | None, limit: int) -> list[AuditRecord]:
        """The newest ``limit`` audit records (of one conversation, or all), oldest first; unfinished turns too."""
        found: list[AuditRecord] = []
        upper = "+"
        # Read first: a turn ending meanwhile is then in the stream rather than in neither.
        unfinished = await self._unfinished(conversation_id, limit)
        while len(found) < limit:
            page = await self._redis.xrevrange(self._audit_key(), max=upper, count=max(limit, _PAGE))
            if not page:
                break
            for _, fields in page:
                if fields is None:  # typed for a group's history, where a deleted entry has none; a range has none such
                    continue
                if conversation_id is None or fields.get("conversation_id") == conversation_id:
                    found.append(audit_from_dict(json.loads(fields["record"])))
                    if len(found) == limit:
                        break
            upper = f"({_id(page[-1][0])}"
        found.reverse()
        return merged(found, unfinished, limit)

    async def _unfinished(self, conversation_id: str | None, limit: int) -> list[AuditRecord]:
        """The newest ``limit`` turns (of one conversation, or all) with tool-call rows and no audit record yet."""
        # Without scores the reply is the members alone, as text (the client decodes replies).
        turn_ids = [turn_id for turn_id in await self._redis.zrevrange(self._calls_key(), 0, -1)
                    if isinstance(turn_id, str)]
        found: list[AuditRecord] = []
        for start in range(0, len(turn_ids), _PAGE):
            async with self._redis.pipeline(transaction=False) as pipe:
                for turn_id in turn_ids[start : start + _PAGE]:
                    pipe.hvals(self._calls_key(turn_id))
                pages = await pipe.execute()
            for bodies in pages:
                records = unfinished_records(decode_tool_call(body) for body in bodies)
                found += [r for r in records if conversation_id is None or r.conversation_id == conversation_id]
            if len(found) >= limit:
                break
        return found[:limit]


def _id(entry_id: bytes | str | None) -> str:
    assert entry_id is not None  # every entry of a range has its id; redis types it optional for other replies
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id
