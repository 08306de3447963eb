"""Per-principal limits: turns per minute, turns in progress, and model tokens per day.

The counts live in the Store, so every replica sees the same ones: a fixed
window counter per UTC minute and per UTC day (:meth:`CounterStore.add_to_counter`)
and one lease per turn in progress (:meth:`LeaseStore.take_lease`). The limits of an
asker come from :func:`limits_for`; today they are the global ``limits:``
section, and the access policy's per-role ``limits`` replace them by handing
the gateway another function.

A store that cannot be reached never costs an answer: the turn is let through
and the failure is logged (as the dedupe check does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

import structlog

from botgateway.config import LimitsConfig
from botgateway.grant import Limits
from botgateway.messages import InboundMessage
from botgateway.principal import principal_id
from botgateway.stores.base import CounterStore, LeaseStore
from botgateway.strings import t

__all__ = [
    "LimitHit", "LimitName", "LimitStore", "LimitValues", "Limits", "PrincipalLimits", "asker_of", "limits_from_config",
]

log = structlog.get_logger(__name__)

LimitName = Literal["turns_per_minute", "concurrent_turns", "tokens_per_day"]
"""Which limit was hit (the config key's name)."""

_MINUTE = 60
_DAY = 86_400


class LimitValues(Protocol):
    """Anything carrying the three limits: :class:`Limits`, or the limits of an access-policy grant."""

    @property
    def turns_per_minute(self) -> int:
        """Questions started per UTC minute (0: no limit)."""
        ...

    @property
    def concurrent_turns(self) -> int:
        """Questions in progress at once (0: no limit)."""
        ...

    @property
    def tokens_per_day(self) -> int:
        """Model tokens per UTC day (0: no limit)."""
        ...


class LimitStore(CounterStore, LeaseStore, Protocol):
    """The part of the Store the limits live in: window counters and the leases of the turns in progress."""


@dataclass(frozen=True, kw_only=True)
class LimitHit:
    """A question refused because its asker reached a limit."""

    limit: LimitName
    """The limit reached."""
    value: int
    """Its value for this asker."""
    resets_at: float | None
    """Unix time the window starts again; None for ``concurrent_turns`` (it frees when a question ends)."""

    def note(self, locale: str, now: float) -> str:
        """What the asker is told: which limit, and when it resets."""
        if self.resets_at is None:
            return t(locale, "limit_concurrent_turns", limit=self.value)
        wait_s = max(1, int(self.resets_at - now + 0.999))
        at = datetime.fromtimestamp(self.resets_at, UTC).strftime("%H:%M")
        return t(locale, f"limit_{self.limit}", limit=self.value, seconds=wait_s, at=at)


def asker_of(msg: InboundMessage) -> str:
    """The platform-qualified id whose limits ``msg`` counts against (``slack:U0123``)."""
    if msg.principal is not None:
        return msg.principal.id
    return principal_id(msg.platform, msg.ctx.user_id or msg.target.user_id)


def limits_from_config(config: LimitsConfig) -> Callable[[str], Limits]:
    """``limits_for(principal)``: the same global limits for everyone (until roles set their own)."""
    limits = Limits(
        turns_per_minute=config.turns_per_minute,
        concurrent_turns=config.concurrent_turns,
        tokens_per_day=config.tokens_per_day,
    )

    def limits_for(principal: str) -> Limits:
        return limits

    return limits_for


class PrincipalLimits:
    """Admits questions against their asker's limits and counts what their turns used.

    Args:
        store: Where the counts live (shared by replicas).
        limits_for: The limits of one principal.
        lease_ttl_s: Longest time one question counts as in progress (a killed process's stop counting).
        clock: Wall clock in Unix seconds (injected so tests can cross a minute or a day).
    """

    def __init__(
        self,
        store: LimitStore,
        limits_for: Callable[[str], Limits],
        *,
        lease_ttl_s: float = 900.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits_for = limits_for
        self._lease_ttl_s = lease_ttl_s
        self.clock = clock
        """The wall clock the windows are cut from."""

    async def admit(self, principal: str, turn_id: str, limits: LimitValues | None = None) -> LimitHit | None:
        """Count a new question of ``principal`` (as ``turn_id``); the limit it hit, if any (then nothing is held).

        ``limits``: the asker's own (from the access decision); by default ``limits_for(principal)``.
        """
        limits = limits if limits is not None else self._limits_for(principal)
        try:
            return await self._admit(principal, turn_id, limits)
        except Exception as exc:  # answering beats refusing for a store hiccup
            log.warning("limits.unavailable", principal=principal, error=type(exc).__name__, detail=str(exc)[:200])
            return None

    async def _admit(self, principal: str, turn_id: str, limits: LimitValues) -> LimitHit | None:
        now = self.clock()
        if limits.tokens_per_day:
            day = int(now // _DAY)
            used = await self._store.add_to_counter(f"tokens:{principal}:{day}", 0, 2 * _DAY)
            if used >= limits.tokens_per_day:
                return LimitHit(limit="tokens_per_day", value=limits.tokens_per_day, resets_at=(day + 1) * _DAY)
        lease = f"turns:{principal}"
        if limits.concurrent_turns and not await self._store.take_lease(
            lease, turn_id, limits.concurrent_turns, self._lease_ttl_s
        ):
            return LimitHit(limit="concurrent_turns", value=limits.concurrent_turns, resets_at=None)
        if limits.turns_per_minute:
            minute = int(now // _MINUTE)
            started = await self._store.add_to_counter(f"turns:{principal}:{minute}", 1, 2 * _MINUTE)
            if started > limits.turns_per_minute:
                if limits.concurrent_turns:
                    await self._store.drop_lease(lease, turn_id)
                return LimitHit(limit="turns_per_minute", value=limits.turns_per_minute, resets_at=(minute + 1) * _MINUTE)
        return None

    async def turn_ended(self, principal: str, turn_id: str, tokens: int) -> None:
        """Count the tokens ``turn_id`` used against today's quota and end its lease (failures are logged).

        Both happen whatever the limits are now: they may have changed since the
        turn was admitted, and today's use must be known when a quota is set later.
        """
        try:
            if tokens > 0:
                day = int(self.clock() // _DAY)
                await self._store.add_to_counter(f"tokens:{principal}:{day}", tokens, 2 * _DAY)
            await self._store.drop_lease(f"turns:{principal}", turn_id)
        except Exception as exc:
            log.warning("limits.count_failed", principal=principal, error=type(exc).__name__, detail=str(exc)[:200])
