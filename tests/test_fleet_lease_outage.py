"""A Redis that accepts connections but never answers (a blackholed master) must not hang a turn before it starts.

The fleet's client gives up on a reply after FLEET_REPLY_TIMEOUT_S; the lease keeps trying for
UNFENCED_AFTER_S (a failover's blip must not let two processes answer one conversation at once) and then lets
the turn run without it, saying so once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import structlog

from botgateway.fleet.lease import ConversationLeases
from botgateway.fleet.redis_fleet import fleet_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def silent_redis() -> AsyncIterator[str]:
    """A loopback server that accepts connections and never replies."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_silent_redis_lets_the_turn_run_without_the_lease_instead_of_hanging(silent_redis: str) -> None:
    client = fleet_client(silent_redis, "probe")
    leases = ConversationLeases(client, "bgtest:silent:", "probe", ttl_s=30, renew_s=10)
    queued: list[str] = []

    async def on_queued() -> None:
        queued.append("queued")

    try:
        with structlog.testing.capture_logs() as logs:
            waited = await leases.acquire("conv-1", "probe/t1", on_queued)
        assert waited is False and queued == []  # it never looked held by someone else
        assert leases.token("conv-1") is None  # held without a fencing token: unfenced
        assert [line["event"] for line in logs].count("fleet.lease_unavailable") == 1
    finally:
        await client.aclose()
