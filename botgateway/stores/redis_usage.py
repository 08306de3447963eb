"""The usage rows in Redis: the STREAM ``usage:{usage}:rows``, one entry per model call (its JSON in field ``row``).

Capped (approximately) at ``max_rows`` entries, and trimmed by age with the
audit records' retention as rows are added. Stream ids start with Redis's time
in ms, so reading from a time on starts at an id; the rows' own times decide.

Each row with a ``row_id`` is added only if its marker (``usage:{usage}:row:<row id>``,
a STRING living :data:`MARKER_TTL_S`, in the stream's cluster slot) could be set
first, in the same script: a group sent again after a lost reply adds nothing twice.
:class:`~botgateway.stores.redis.RedisStore` delegates here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis.asyncio as aioredis

from botgateway.stores._usage_codec import decode_usage, encode_usage
from botgateway.stores.base import UsageRow

__all__ = ["MARKER_TTL_S", "RedisUsage"]

_PAGE = 1000
"""Entries read per round trip."""

MARKER_TTL_S = 86_400
"""How long a written row's id is remembered: far longer than any retry of its write (the writer gives up at
shutdown), short enough that the markers cost little."""

# KEYS: the stream, then the rows' markers. ARGV: max_rows, marker ttl (ms), oldest id to keep ('' = none), then per
# row its JSON and the index in KEYS of its marker ('0': a row without an id, always added).
_RECORD = """
local added = 0
for i = 1, (#ARGV - 3) / 2 do
  local marker = tonumber(ARGV[3 + 2 * i])
  if marker == 0 or redis.call('SET', KEYS[marker], '1', 'NX', 'PX', ARGV[2]) then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'row', ARGV[2 + 2 * i])
    added = added + 1
  end
end
if ARGV[3] ~= '' then
  redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[3])
end
return added
"""


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
        self.key = f"{prefix}usage:{{usage}}:rows"
        """The stream's key."""
        self.max_rows = max_rows
        """Approximate cap on the stream's length."""
        self.retention_s = retention_s
        """Age past which rows are trimmed (``None``: kept, up to ``max_rows``)."""
        self._markers = f"{prefix}usage:{{usage}}:row:"  # one hash slot with the stream: one script writes both
        self._record = redis.register_script(_RECORD)

    async def record(self, rows: Sequence[UsageRow]) -> None:
        """Append ``rows`` in one script (but those whose id was written before), then trim what is past the
        retention."""
        if not rows:
            return
        keys = [self.key]
        args: list[str | int] = [self.max_rows, MARKER_TTL_S * 1000]
        args.append("" if self.retention_s is None else str(int((time.time() - self.retention_s) * 1000)))
        for row in rows:
            marker = 0
            if row.row_id:
                keys.append(self._markers + row.row_id)
                marker = len(keys)
            args += [encode_usage(row), marker]
        await self._record(keys=keys, args=args)

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
                if fields is None:  # typed for a group's history, where a deleted entry has none; a range has none such
                    continue
                row = decode_usage(fields[b"row"] if b"row" in fields else fields["row"])
                if since is None or row.at >= since:
                    found.append(row)
            upper = f"({_id(page[-1][0])}"
        found.reverse()
        return found


def _id(entry_id: bytes | str | None) -> str:
    assert entry_id is not None  # every entry of a range has its id; redis types it optional for other replies
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id
