"""The seam behind the budget's fair queue: may one call of a key go now, and if not, when to ask again.

:class:`~botgateway.budget.rate_budget.RateBudget` keeps the callers waiting in line (urgent
first, round-robin per owner, least-served live updates first); a
:class:`Ledger` keeps the accounts: grants in a window or tokens in a bucket,
the calls reserved for open cards' finals and cleanups, pauses after a
throttle, the limit learned from throttles (:mod:`botgateway.budget.learned`). One process alone keeps them
in memory (:class:`~botgateway.budget.ledgers.local.LocalLedger`); a fleet keeps them
in Redis (:class:`~botgateway.budget.ledgers.shared.SharedLedger`), where every
process's calls and reservations count against the same limits.

The planning rules below are the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from botgateway.budget.learned import LEARN_BACK, Estimate
from botgateway.budget.rate_limit import RateLimit

__all__ = ["LEARN_BACK", "PACED_SHARE", "SLICES", "Ledger", "Verdict"]

SLICES = 10
"""A window is paced in this many slices for the live updates of cards that already show something."""

PACED_SHARE = 0.5
"""Once less than this share of a window's allowance is left to spare, later live updates are paced to this
share of it, spread evenly over the slices: the rest stays for new cards' first text and for finals, whenever in
the window they come."""


@dataclass(frozen=True)
class Verdict:
    """The answer to one request for a call."""

    granted: bool
    """The call may go now (it is counted)."""
    retry_in_s: float = 0.0
    """Not granted: ask again after this long at the latest (a release or a pause wakes the queue sooner)."""
    free_in_s: float | None = None
    """Not granted: when the accounts expect a call to be free at the earliest (None: :attr:`retry_in_s`). It
    differs where the ledger asks again sooner than that, in case another process gives a call back."""
    ticket: str = ""
    """Granted: the grant's name, to :meth:`Ledger.give_back` it when its caller left meanwhile."""
    count: int = 1
    """Granted: how many calls (a token bucket may serve several callers in line at once); each one not made
    is given back with :attr:`ticket`."""


class Ledger(Protocol):
    """The accounts of rate budgets: grants, reservations, pauses, per key.

    ``live`` asks for a live update, which gets only what the reservations
    leave; otherwise a call that opens or closes a card, which any free call
    may serve. ``later``: the owner already had a live update (its card shows
    something), so once a window runs low it keeps to the slice pace.
    """

    def take_now(self, key: str, limit: RateLimit, *, live: bool, later: bool) -> bool:
        """Count one call of ``key`` if it may go now and that can be known without waiting (else False)."""
        ...

    async def take(self, key: str, limit: RateLimit, *, live: bool, later: bool, want: int = 1) -> Verdict:
        """Count one call of ``key`` if it may go now; otherwise say when to ask again.

        ``want``: callers waiting in line; a token bucket may grant up to that many at once (never a window,
        whose calls are planned one by one).
        """
        ...

    def give_back(self, key: str, ticket: str) -> None:
        """A granted call was not made (its caller left as it was granted): it no longer counts."""
        ...

    def late(self, key: str, seconds: float) -> None:
        """A granted call of ``key`` went out ``seconds`` after its grant (the process was busy meanwhile)."""
        ...

    def landed(self, key: str) -> None:
        """A granted call of ``key`` got its answer (or failed): a window's grant counts from now, and with a limit on
        arrivals it counts one arrival window more."""
        ...

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner``: live updates leave it alone."""
        ...

    async def claim(self, key: str, limit: RateLimit, owner: str) -> bool:
        """Reserve one call of ``key`` for ``owner`` only if the accounts can still promise it: a window's calls
        left beyond every reservation (the fleet's, in one atomic step). False: nothing was reserved. A token
        bucket refills, so its calls are always promised."""
        ...

    def unreserve(self, key: str, owner: str) -> None:
        """One call reserved by ``owner`` was made and landed: it is no longer kept."""
        ...

    def release(self, key: str, owner: str) -> None:
        """Give back every call ``owner`` still holds of ``key``."""
        ...

    def reserved(self, key: str) -> int:
        """Calls of ``key`` this process's owners hold now."""
        ...

    def pause(self, key: str, seconds: float) -> None:
        """The platform throttled a call of ``key``: grant no call of it for ``seconds``, lower its learned limit
        (:mod:`botgateway.budget.learned`) and count the throttle."""
        ...

    def estimate(self, key: str, limit: RateLimit) -> Estimate:
        """``key``'s configured ``limit``, its learned share now and the throttles heard (as last seen, for a ledger
        that must ask another process)."""
        ...

    def paused_for(self, key: str) -> float:
        """Seconds left of the pause on ``key`` (0 when not paused)."""
        ...

    def available(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` that could be made now, before reservations (0 while paused)."""
        ...

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` a live update or a new card could use now: what is free beyond the reservations."""
        ...
