"""One turn per conversation across the fleet: a lease in Redis, with a fencing token.

Before a turn runs (once it is first in its process's line for the
conversation) it takes the conversation's lease: ``SET NX PX`` of the
conversation's lease key with the holder's id (``<instance id>/<turn id>``),
and, in the same script, a new fencing token: the conversation's counter
(:mod:`botgateway.stores.redis_history` keeps it beside the history, seeded
from Redis's clock so it never goes back) moves at every acquisition. While the
turn runs, a background task renews the lease every ``renew_s``; a process that
stops renewing (killed, or paused past the TTL) loses it after ``ttl_s``.

Every history change made while the lease is held carries its token
(:meth:`ConversationLeases.token`, read by :class:`~botgateway.history.memory.Memory`),
and the store refuses a change whose token is older than the conversation's:
a process that lost its lease cannot commit any more.

A turn that finds the lease held waits: it is woken by the release notice the
holder publishes on the control channel (:meth:`ConversationLeases.wake`), and
tries again every ``recheck_s`` anyway (a killed holder publishes nothing; its
lease lapses). A lease held under this process's own instance id by no turn of
this process is its predecessor's (an instance id outlives a restart, and is
never held by two live processes: :mod:`botgateway.instance`): it is taken over
at once, the new token fencing off anything the dead process had under way. The lease is given back only after the turn's history is in the
store (:meth:`~botgateway.fleet.redis_fleet.RedisFleet.hand_over`), so whoever
takes it next reads that history, in whatever process.

If Redis cannot be reached, a turn runs without the lease (logged once per
outage): answering beats refusing, as for the per-asker limits; its changes then
carry no token and are written unchecked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis
import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.fleet.control import control_channel, notice
from botgateway.stores.redis_history import SEED_FROM_CLOCK, conversation_keys

__all__ = ["FENCE_TTL_S", "RECHECK_S", "UNFENCED_AFTER_S", "UNREACHABLE_RETRY", "ConversationLeases"]

log = structlog.get_logger(__name__)

UNFENCED_AFTER_S = 5.0
"""How long a turn keeps trying to take its conversation's lease while Redis errs, before it runs without it."""

UNREACHABLE_RETRY = Backoff(base_s=0.5, max_s=0.5)
"""The pause between those tries."""

RECHECK_S = 2.0
"""How often a waiting turn tries the lease again without a release notice (its holder was killed)."""
FENCE_TTL_S = 30 * 86_400.0
"""A conversation's fencing counter outlives its lease by this long (a new one would start from the clock anyway)."""

# KEYS: lease, fence. ARGV: holder, ttl_ms, fence_ttl_ms, stale (a holder prefix whose lease is taken over, or '').
# Returns the new fencing token, or 0 when held by another.
_TAKE = SEED_FROM_CLOCK + """
local current = redis.call('GET', KEYS[1])
if current and (ARGV[4] == '' or string.sub(current, 1, string.len(ARGV[4])) ~= ARGV[4]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local token
if redis.call('EXISTS', KEYS[2]) == 1 then
  token = redis.call('INCR', KEYS[2])
else
  local s = seed()
  redis.call('SET', KEYS[2], s)
  token = tonumber(s)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return token
"""

# KEYS: lease. ARGV: holder, ttl_ms. Returns 1 while the holder still holds it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease. ARGV: holder, channel, notice. Frees the lease if the holder still holds it, and tells the waiters.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
"""


@dataclass
class _Held:
    """A lease this process holds (changed in place when its renewal finds it lost)."""

    holder: str
    token: int | None
    """``None``: taken while Redis was unreachable (nothing to fence with)."""
    renewal: asyncio.Task[None] | None = field(default=None, compare=False)


@dataclass
class _Waiters:
    """Turns of this process waiting for one conversation's lease, and the event a release notice sets."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0


class ConversationLeases:
    """This process's conversation leases (mutable: what it holds and who waits).

    Args:
        client: A Redis client.
        prefix: The deployment's key prefix (the lease and counter live with the conversation's history).
        instance_id: This process's id (part of each holder's id).
        ttl_s: How long a lease lasts unless renewed (the process's liveness: ``gateway.instance_ttl_s``).
        renew_s: How often a held lease is renewed (``gateway.heartbeat_s``); shorter than ``ttl_s``, or the lease
            lapses between renewals, as a paused process's does (the config section checks it).
        recheck_s: How often a waiting turn tries again without a notice.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        instance_id: str,
        *,
        ttl_s: float,
        renew_s: float,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.instance_id = instance_id
        """This process's id."""
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._renew_s = renew_s
        self._recheck_s = recheck_s
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._held: dict[str, _Held] = {}
        self._waiters: dict[str, _Waiters] = {}
        self._ours: dict[str, set[str]] = {}
        """Per conversation, this process's holders taking, holding or giving back its lease (until given back)."""
        self._reachable = True
        self._renewals = BackgroundTasks()
        """One renewal per lease held."""
        self._releases = BackgroundTasks()
        """Releases of leases whose taker was cancelled."""

    def holder_id(self, turn_id: str) -> str:
        """The holder's id of ``turn_id``'s lease: which process, which turn."""
        return f"{self.instance_id}/{turn_id}"

    def token(self, conversation_id: str) -> int | None:
        """The fencing token of the conversation's lease held here (``None``: none held)."""
        held = self._held.get(conversation_id)
        return held.token if held is not None else None

    def holds(self, conversation_id: str, holder: str) -> bool:
        """Whether ``holder`` holds the conversation's lease here."""
        held = self._held.get(conversation_id)
        return held is not None and held.holder == holder

    async def acquire(self, conversation_id: str, holder: str, queued: Callable[[], Awaitable[None]]) -> bool:
        """Wait until ``holder`` holds the conversation's lease; ``queued()`` once, before the first wait.

        True when it had to wait. A cancellation while waiting leaves nothing held.
        """
        waiters = self._waiters.setdefault(conversation_id, _Waiters())
        waiters.count += 1
        self._ours.setdefault(conversation_id, set()).add(holder)
        waited = False
        try:
            unreachable_since: float | None = None
            while True:
                wake = waiters.wake  # taken before trying: a notice arriving in between is not lost
                token = await self._try(conversation_id, holder)
                if token == 0 and self._keep_trying(unreachable_since):
                    # A blip (a failover's seconds of errors) must not let two processes answer one conversation
                    # at once: try again for a while before running without the lease.
                    unreachable_since = unreachable_since or asyncio.get_running_loop().time()
                    await asyncio.sleep(UNREACHABLE_RETRY.delay(0))
                    continue
                if token is not None:
                    self._hold(conversation_id, holder, token or None)
                    return waited
                if not waited:
                    waited = True
                    log.info("fleet.lease_waiting", conversation=conversation_id)
                    await queued()
                try:
                    await asyncio.wait_for(wake.wait(), self._recheck_s)
                except TimeoutError:
                    pass
        except asyncio.CancelledError:
            if not self.holds(conversation_id, holder):
                # The script may have taken it as we were cancelled: give it back.
                self._releases.spawn(self.release(conversation_id, holder), name=f"lease-release-{conversation_id}")
            raise
        finally:
            waiters.count -= 1
            if waiters.count == 0 and self._waiters.get(conversation_id) is waiters:
                del self._waiters[conversation_id]

    @staticmethod
    def _keep_trying(unreachable_since: float | None) -> bool:
        """Whether to try the lease again rather than run unfenced (Redis unreachable for less than the bound)."""
        if unreachable_since is None:
            return True
        return asyncio.get_running_loop().time() - unreachable_since < UNFENCED_AFTER_S

    async def _try(self, conversation_id: str, holder: str) -> int | None:
        """One attempt: the new token (0: Redis unreachable, run unfenced), or ``None`` when another holds it."""
        keys = conversation_keys(self._prefix, conversation_id)
        # Only when no other turn of this process has a part in it: then a holder under this id is a dead predecessor.
        stale = self.holder_id("") if self._ours.get(conversation_id) == {holder} else ""
        try:
            args: list[str | int] = [holder, self._ttl_ms, int(FENCE_TTL_S * 1000), stale]
            token = int(await self._take(keys=[keys.lease, keys.fence], args=args))
        except Exception as exc:
            if self._reachable:
                log.warning("fleet.lease_unavailable", error=type(exc).__name__, detail=str(exc)[:200],
                            note="turns run without the conversation's lease until Redis answers again")
            self._reachable = False
            return 0
        if not self._reachable:
            log.info("fleet.lease_restored")
        self._reachable = True
        return token or None

    def _hold(self, conversation_id: str, holder: str, token: int | None) -> None:
        held = _Held(holder, token)
        self._held[conversation_id] = held
        if token is not None:
            renewal = self._keep(conversation_id, held)
            held.renewal = self._renewals.spawn(renewal, name=f"lease-renew-{conversation_id}")

    async def _keep(self, conversation_id: str, held: _Held) -> None:
        """Renew ``held`` every ``renew_s`` while it is held; stop when it is found lost (logged)."""
        lease = conversation_keys(self._prefix, conversation_id).lease
        while True:
            await asyncio.sleep(self._renew_s)
            try:
                kept = await self._renew(keys=[lease], args=[held.holder, self._ttl_ms])
            except Exception as exc:  # tried again next time; if it lapses meanwhile, the fencing token protects
                log.warning("fleet.lease_renew_failed", conversation=conversation_id, error=type(exc).__name__)
                continue
            if not kept:
                log.warning("fleet.lease_lost", conversation=conversation_id,
                            note="held past its expiry without renewal; this turn's history changes will be refused")
                return

    async def release(self, conversation_id: str, holder: str) -> None:
        """Give the lease back if ``holder`` holds it, and tell the waiting turns of every process."""
        held = self._held.get(conversation_id)
        if held is not None and held.holder == holder:
            del self._held[conversation_id]
            if held.renewal is not None:
                held.renewal.cancel()
        lease = conversation_keys(self._prefix, conversation_id).lease
        message = notice("released", {"conversation": conversation_id}, sender=self.instance_id)
        try:
            await self._release(keys=[lease], args=[holder, control_channel(self._prefix), message])
        except Exception as exc:  # it lapses after its TTL
            log.warning("fleet.lease_release_failed", conversation=conversation_id, error=type(exc).__name__)
        finally:
            ours = self._ours.get(conversation_id)
            if ours is not None:
                ours.discard(holder)
                if not ours:
                    del self._ours[conversation_id]

    def wake(self, conversation_id: str) -> None:
        """A lease of the conversation was given back: its waiting turns try at once."""
        waiters = self._waiters.get(conversation_id)
        if waiters is not None:
            waiters.wake.set()
            waiters.wake = asyncio.Event()

    async def aclose(self) -> None:
        """Stop renewing (the leases still held lapse after their TTL)."""
        await self._releases.wait(timeout=2.0)
        await self._releases.aclose()
        await self._renewals.aclose()
        self._held.clear()
