"""The fleet's accounts as this process last saw them: what a sink plans by, without a round trip.

A Redis round trip cannot be made synchronously, and a sink asks what is
spare many times a second while it plans its cards' calls. Each key's last
answer from Redis (a grant, a batch of a leased bucket, or a look without
taking anything) is kept; once it is older than ``poll_s`` a fresh one is asked
for in the background, and the next question gets it.
"""

from __future__ import annotations

from collections.abc import Callable

from botgateway.background import BackgroundTasks
from botgateway.budget.ledgers.redis import Answer, RedisLedger
from botgateway.budget.ledgers.reservations import ReservationBook
from botgateway.budget.rate_limit import RateLimit

__all__ = ["LastSeen"]


class LastSeen:
    """Each key's last answer from the fleet's accounts (mutable; owned by the shared ledger).

    Args:
        redis: The fleet's accounts.
        book: This process's reservations (each look tells Redis how many are this process's).
        poll_s: How old an answer may get before a fresh one is asked for.
        tasks: Owns the looks made in the background.
        on_error: Hears a look that failed (Redis unreachable).
    """

    def __init__(self, redis: RedisLedger, book: ReservationBook, *, poll_s: float, tasks: BackgroundTasks,
                 on_error: Callable[[BaseException], None]) -> None:
        self._redis = redis
        self._book = book
        self._poll_s = poll_s
        self._tasks = tasks
        self._on_error = on_error
        self._seen: dict[str, Answer] = {}
        self._looking: set[str] = set()

    def get(self, key: str) -> Answer | None:
        """The key's last answer, however old (None: never seen, or forgotten)."""
        return self._seen.get(key)

    def note(self, key: str, answer: Answer) -> None:
        """Redis just answered for ``key``."""
        self._seen[key] = answer

    def look(self, key: str, limit: RateLimit) -> Answer | None:
        """The key's last answer; a fresh one is asked for in the background once it is ``poll_s`` old."""
        seen = self._seen.get(key)
        if (seen is None or self._redis.clock() - seen.at >= self._poll_s) and key not in self._looking:
            self._looking.add(key)
            self._tasks.spawn(self._peek(key, limit), name="rate-budget:peek")
        return seen

    async def refresh(self, key: str, limit: RateLimit) -> None:
        """Look at ``key`` in Redis now, taking nothing; raises what Redis raised."""
        self._seen[key] = await self._redis.take(key, limit, live=True, later=False, mine=self._book.count(key),
                                                 peek=True)

    def clear(self) -> None:
        """Forget every answer seen."""
        self._seen.clear()

    async def _peek(self, key: str, limit: RateLimit) -> None:
        try:
            await self.refresh(key, limit)
        except Exception as exc:
            self._on_error(exc)
        finally:
            self._looking.discard(key)
