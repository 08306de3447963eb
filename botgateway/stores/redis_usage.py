"""The usage rows in Redis: the STREAM ``usage``, one entry per model call (its JSON in field ``row``).

Capped (approximately) at ``max_rows`` entries, and trimmed by age with the
audit records' retention as rows are added. Stream ids start with Redis's time
in ms, so reading from a time on starts at an id; the rows' own times decide.
:class:`~botgateway.stores.redis.RedisStore` delegates here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis.asyncio as aioredis

from botgateway.stores._usage_codec import decode_usage, encode_usage
from botgateway.stores.base import UsageRow

__all__ = ["RedisUsage"]

_PAGE = 1000
"""Entries read per round trip."""


class RedisUsage:
    """Usage rows in one stream under ``prefix``.

    Args:
        redis: The store's client.
        prefix: The deployment's key prefix.
        max_rows: Approximate cap on the stream's length.
        retention_s: Rows older than this are trimmed as new ones are added; ``None`` keeps them.
    """

    def __init__(self, redis: aioredis.Redis, prefix: str, *, max_rows: int, retention_s: float | None) -> None:
        self._redis = redis
        self.key = f"{prefix}usage"
        """The stream's key."""
        self.max_rows = max_rows
        """Approximate cap on the stream's length."""
        self.retention_s = retention_s
        """Age past which rows are trimmed (``None``: kept, up to ``max_rows``)."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        """Append ``rows`` in one pipeline, then trim what is past the retention."""
        if not rows:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for row in rows:
                pipe.xadd(self.key, {"row": encode_usage(row)}, maxlen=self.max_rows, approximate=True)
            if self.retention_s is not None:
                pipe.xtrim(self.key, minid=str(int((time.time() - self.retention_s) * 1000)), approximate=True)
            await pipe.execute()

    async def rows(self, since: float | None, limit: int) -> list[UsageRow]:
        """The newest ``limit`` rows from ``since`` on, oldest first."""
        lowest = "-" if since is None else str(max(0, int(since * 1000)))
        found: list[UsageRow] = []
        upper = "+"
        while len(found) < limit:
            page = await self._redis.xrevrange(self.key, max=upper, min=lowest, count=min(_PAGE, limit - len(found)))
            if not page:
                break
            for _, fields in page:
                row = decode_usage(fields[b"row"] if b"row" in fields else fields["row"])
                if since is None or row.at >= since:
                    found.append(row)
            upper = f"({_id(page[-1][0])}"
        found.reverse()
        return found


def _id(entry_id: bytes | str) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id
