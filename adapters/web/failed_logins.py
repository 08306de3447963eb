"""Failed credential checks per client address: the console's logins and the API's keys wait out the same window.

Failures are counted in the Store (shared by every replica) under the client's
address (:class:`~adapters.web.client_addr.TrustedProxies` says which), one
count for logins and API keys alike: guesses cannot be split between them to
get more. Past :data:`MAX_FAILED_LOGINS` in :data:`FAILED_LOGIN_WINDOW_S`,
every attempt from that address is refused until the window ends, the right
password or key included, so a refusal tells a guesser nothing.

A login is counted before its check (:meth:`FailedLogins.attempt`, taken back
by :meth:`FailedLogins.succeeded`): concurrent guesses each see the others', so
at most the limit are checked, and no slow password check runs for a locked
address. An API key is checked first, as it costs nothing: a wrong one is
counted (:meth:`FailedLogins.attempt`), a right one only asks whether the
address is locked out (:meth:`FailedLogins.locked`), so a client's many
requests in parallel never count against it.
"""

from __future__ import annotations

from botgateway.stores.base import CounterStore

__all__ = ["FAILED_LOGIN_WINDOW_S", "MAX_FAILED_LOGINS", "FailedLogins"]

MAX_FAILED_LOGINS = 10
"""Failed logins or API keys from one address within :data:`FAILED_LOGIN_WINDOW_S` before the next ones are refused."""

FAILED_LOGIN_WINDOW_S = 900.0
"""The window failures are counted in (15 minutes); also the ``Retry-After`` of a refusal (the longest wait left)."""

_FAILURES_PREFIX = "web:login-failures:"


class FailedLogins:
    """The failures of each client address in the current window, and whether it is locked out."""

    def __init__(self, store: CounterStore, *, limit: int = MAX_FAILED_LOGINS,
                 window_s: float = FAILED_LOGIN_WINDOW_S) -> None:
        self._store = store
        self._limit = limit
        self._window_s = window_s
        # Failures of this process on their way to the Store, per address: a read on SQLite does not wait for the
        # writes queued before it, and a right key must not slip past the wrong ones sent just before it.
        self._in_flight: dict[str, int] = {}

    @property
    def window_s(self) -> float:
        """How long a locked-out address waits at most (the ``Retry-After`` of a refusal)."""
        return self._window_s

    async def attempt(self, client: str) -> bool:
        """Count one failure of ``client`` (an attempt not yet checked counts as one); False past the limit."""
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        try:
            total = await self._store.add_to_counter(_FAILURES_PREFIX + client, 1, self._window_s)
        finally:
            left = self._in_flight.pop(client) - 1
            if left:
                self._in_flight[client] = left
        return total <= self._limit

    async def succeeded(self, client: str) -> None:
        """Take back the count of an attempt of ``client`` that proved right: a success is no failure."""
        await self._store.add_to_counter(_FAILURES_PREFIX + client, -1, self._window_s)

    async def locked(self, client: str) -> bool:
        """Whether ``client`` has used up its failures in this window: what it sends now waits, right or wrong."""
        counted = await self._store.add_to_counter(_FAILURES_PREFIX + client, 0, self._window_s)
        return counted + self._in_flight.get(client, 0) >= self._limit
