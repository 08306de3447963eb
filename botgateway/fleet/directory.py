"""Which process holds which turn, conversation and approval code: a directory in Redis, read through liveness.

Under the deployment's prefix:

- ``fleet:turn:<turn id>`` — STRING, the instance id of the process running (or queueing) the turn;
- ``fleet:conv:<conversation id>`` — HASH turn id → instance id, the conversation's turns in the fleet;
- ``fleet:approval:<code>`` — STRING, the instance id whose desk shows the code, or ``-`` while the code is
  quarantined after its approval ended (so a late ``approve 4821`` never meets another request).

Entries are written when a turn starts (or an approval opens) and removed when
it ends, by the process that wrote them only: a question moved to another
process by a draining one keeps its turn id (:mod:`botgateway.fleet.handoff`),
and its new process's entry must outlive the old one's removal. What keeps a
killed process's entries from misleading anyone is
liveness, not their own expiry: an entry counts only while its process is live
(its heartbeats, :meth:`~botgateway.stores.base.Store.live_instances`, the same
rule that lets recovery close its cards). Entries also expire after
:data:`BACKSTOP_S`, so a killed process's leftovers do not stay forever.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
import structlog

from botgateway.approvals import CODE_QUARANTINE_S
from botgateway.background import BackgroundTasks

__all__ = ["BACKSTOP_S", "FleetDirectory"]

log = structlog.get_logger(__name__)

BACKSTOP_S = 86_400.0
"""Entries expire this long after they were written, whatever happens (no turn or approval lasts a day)."""

_QUARANTINED = "-"

# KEYS: the turn's key. ARGV: instance id. Removes the entry if this process wrote it.
_REMOVE_TURN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: the conversation's key. ARGV: turn id, instance id. Removes the turn from it if this process wrote it.
_REMOVE_FROM_CONVERSATION = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS: the code's key. ARGV: instance id, quarantine_ms. The code stays out of use, unless another process holds it.
_RELEASE_CODE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], '-', 'PX', ARGV[2])
  return 1
end
return 0
"""


class FleetDirectory:
    """The fleet's directory of turns, conversations and approval codes (also the desk's :class:`SharedCodes`).

    Args:
        client: A Redis client.
        prefix: The deployment's key prefix.
        instance_id: This process's id (its own entries are never "elsewhere").
        live: The ids of the live processes (the store's heartbeats).
        quarantine_s: How long an ended approval's code stays out of use in every process.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        instance_id: str,
        *,
        live: Callable[[], Awaitable[set[str]]],
        quarantine_s: float = CODE_QUARANTINE_S,
    ) -> None:
        self.instance_id = instance_id
        """This process's id."""
        self._redis = client
        self._prefix = prefix
        self._live = live
        self._backstop_ms = int(BACKSTOP_S * 1000)
        self._quarantine_ms = max(1, int(quarantine_s * 1000))
        self._release_code = client.register_script(_RELEASE_CODE)
        self._remove_turn = client.register_script(_REMOVE_TURN)
        self._remove_from_conversation = client.register_script(_REMOVE_FROM_CONVERSATION)
        self._releases = BackgroundTasks()
        """Codes being given back, in the background (the desk closes requests synchronously)."""

    def _turn_key(self, turn_id: str) -> str:
        return f"{self._prefix}fleet:turn:{turn_id}"

    def _conversation_key(self, conversation_id: str) -> str:
        return f"{self._prefix}fleet:conv:{conversation_id}"

    def _code_key(self, code: str) -> str:
        return f"{self._prefix}fleet:approval:{code}"

    # --- turns ----------------------------------------------------------------------

    async def add_turn(self, turn_id: str, conversation_id: str) -> None:
        """``turn_id`` of ``conversation_id`` runs or waits in this process."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self._turn_key(turn_id), self.instance_id, px=self._backstop_ms)
            pipe.hset(self._conversation_key(conversation_id), turn_id, self.instance_id)
            pipe.pexpire(self._conversation_key(conversation_id), self._backstop_ms)
            await pipe.execute()

    async def remove_turn(self, turn_id: str, conversation_id: str) -> None:
        """``turn_id`` has ended here (its entries are left alone once another process took it over)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            await self._remove_turn(keys=[self._turn_key(turn_id)], args=[self.instance_id], client=pipe)
            await self._remove_from_conversation(keys=[self._conversation_key(conversation_id)],
                                                 args=[turn_id, self.instance_id], client=pipe)
            await pipe.execute()

    async def turn_owner(self, turn_id: str) -> str | None:
        """The other live process holding ``turn_id``, if any."""
        owner = await self._redis.get(self._turn_key(turn_id))
        return await self._elsewhere(owner)

    async def conversation_owners(self, conversation_id: str) -> set[str]:
        """The other live processes holding turns of ``conversation_id``."""
        # Text replies (the client decodes them); anything else could match no live process's id anyway.
        owners = {owner for owner in await self._redis.hvals(self._conversation_key(conversation_id))
                  if isinstance(owner, str)}
        owners.discard(self.instance_id)
        if not owners:
            return set()
        return owners & await self._live()

    async def _elsewhere(self, owner: str | bytes | None) -> str | None:
        if isinstance(owner, bytes):
            owner = owner.decode()
        if not owner or owner in (self.instance_id, _QUARANTINED):
            return None
        return owner if owner in await self._live() else None

    # --- approval codes (SharedCodes) ---------------------------------------------------

    async def claim(self, code: str) -> bool:
        """Reserve ``code`` for this process; False when another process uses it or it is quarantined."""
        return bool(await self._redis.set(self._code_key(code), self.instance_id, nx=True, px=self._backstop_ms))

    def release(self, code: str) -> None:
        """The approval under ``code`` ended here: quarantine the code fleet-wide (in the background)."""
        self._releases.spawn(self._quarantine(code), name=f"fleet-code-{code}")

    async def _quarantine(self, code: str) -> None:
        try:
            await self._release_code(keys=[self._code_key(code)], args=[self.instance_id, self._quarantine_ms])
        except Exception as exc:  # the entry then lapses after the backstop; lookups ignore it once we are gone
            log.warning("fleet.code_release_failed", code=code, error=type(exc).__name__)

    async def code_owner(self, code: str) -> str | None:
        """The other live process whose desk shows ``code``, if any."""
        owner = await self._redis.get(self._code_key(code.strip().lstrip("#")))
        return await self._elsewhere(owner)

    async def aclose(self) -> None:
        """Let the codes being given back finish (briefly), then stop."""
        await self._releases.wait(timeout=2.0)
        await self._releases.aclose()
