"""The store, the shared budget and the fleet's control channel through ``redis+sentinel://``, TLS, and a failover.

Real processes: a redis-server (with a password) and a Redis Sentinel watching
it (with its own password), both started by the test on free loopback ports
(for the TLS test, both speak only TLS, with a CA the test makes). The Sentinel
does not answer data commands, so a client that talked to the URL's address as
if it were the Redis would fail these tests.

The failover test adds a replica, kills the master and has the Sentinel
promote the replica (``SENTINEL FAILOVER``); it waits for the Sentinel's own
``+switch-master`` event, never for a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from botgateway.budget import RateLimit, RedisLedger
from botgateway.fleet.control import ControlChannel
from botgateway.fleet.lease import ConversationLeases
from botgateway.fleet.redis_fleet import fleet_client
from botgateway.stores import StoredTurn, StoreError
from botgateway.stores.redis import RedisStore
from botgateway.stores.redis_history import conversation_keys
from tests.fakes.redis_sentinel import SERVICE, RedisSentinel
from tests.fakes.redis_server import RedisServer, closed_port
from tests.fakes.stores import unique_prefix
from tests.fakes.tls import make_tls_files

MASTER_PASSWORD = "master-pw-0f3c9a"
SENTINEL_PASSWORD = "sentinel-pw-7b21d4"
HANG_GUARD_S = 60.0
"""Upper bound on waiting for something the test's own processes do (never a timing assertion)."""


@dataclass
class Deployment:
    """A master and the Sentinel watching it (and a replica, when asked for)."""

    master: RedisServer
    sentinel: RedisSentinel
    replica: RedisServer | None = None


@asynccontextmanager
async def deploy(folder: Path, *, replica: bool = False, tls: bool = False) -> AsyncIterator[Deployment]:
    """Start a master (and its replica, before the Sentinel, whose first look at the master then lists it).

    ``tls``: every process speaks only TLS.
    """
    started: list[RedisServer | RedisSentinel] = []
    files = make_tls_files(folder / "tls") if tls else None
    try:
        (folder / "master").mkdir()
        master = RedisServer(folder / "master", password=MASTER_PASSWORD, tls=files)
        started.append(master)
        await master.start()
        copy = None
        if replica:
            (folder / "replica").mkdir()
            copy = RedisServer(folder / "replica", password=MASTER_PASSWORD, tls=files,
                               args=["--replicaof", "127.0.0.1", str(master.port)])
            started.append(copy)
            await copy.start()
        sentinel = RedisSentinel(folder / "sentinel", master, password=SENTINEL_PASSWORD)
        started.append(sentinel)
        await sentinel.start()
        yield Deployment(master, sentinel, copy)
    finally:
        for process in reversed(started):
            process.kill()


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[Deployment]:
    async with deploy(tmp_path) as running:
        yield running


def turn(turn_id: str) -> StoredTurn:
    return StoredTurn(
        turn_id=turn_id,
        messages=(
            {"role": "user", "content": f"question {turn_id}"},
            {"role": "assistant", "content": f"answer {turn_id}"},
        ),
        created_at=time.time(),
    )


def direct(server: RedisServer) -> aioredis.Redis:
    """A plain client of one redis-server, bypassing the Sentinel."""
    return aioredis.Redis.from_url(server.url, decode_responses=True)


# --- the three clients, through the Sentinel -----------------------------------------------


async def test_the_store_keeps_and_reads_a_turn_through_the_sentinel(deployment: Deployment) -> None:
    prefix = unique_prefix()
    url = deployment.sentinel.url()
    store = RedisStore(url, prefix)
    try:
        await store.open()
        await store.append_turn("conv-1", turn("t1"))
        assert [t.turn_id for t in await store.load_turns("conv-1")] == ["t1"]
        assert await store.claim("msg-1", 60) and not await store.claim("msg-1", 60)
        async with direct(deployment.master) as master:  # it is on the master the Sentinel named
            assert await master.hexists(conversation_keys(prefix, "conv-1").turns, "t1")
        assert MASTER_PASSWORD not in repr(store) and SENTINEL_PASSWORD not in repr(store)
        assert "***" in store.safe_url and f"127.0.0.1:{deployment.sentinel.port}/{SERVICE}" in store.safe_url
    finally:
        await store.close()


async def test_the_shared_budget_takes_its_tokens_through_the_sentinel(deployment: Deployment) -> None:
    prefix = unique_prefix()
    limit = RateLimit(rate_per_s=1 / 60, burst=1, window_s=60.0)
    first = RedisLedger.connect(deployment.sentinel.url(), prefix=prefix, instance_id="a")
    second = RedisLedger.connect(deployment.sentinel.url(), prefix=prefix, instance_id="b")
    try:
        granted = await first.take("slack:T1:chat.update", limit, live=False, later=False, mine=0)
        refused = await second.take("slack:T1:chat.update", limit, live=False, later=False, mine=0)
        assert granted.granted and not refused.granted  # one window, in the master, for both processes
        assert refused.retry_in_s > 0
    finally:
        await first.aclose()
        await second.aclose()


async def test_the_fleet_control_channel_carries_a_stop_and_its_answer_through_the_sentinel(
    deployment: Deployment,
) -> None:
    prefix = unique_prefix()
    url = deployment.sentinel.url()
    client_a, client_b = fleet_client(url, "proc-a"), fleet_client(url, "proc-b")
    a, b = ControlChannel(client_a, prefix, "proc-a"), ControlChannel(client_b, prefix, "proc-b")
    stops: list[Mapping[str, Any]] = []

    async def stop_here(body: Mapping[str, Any]) -> Mapping[str, Any]:
        stops.append(body)
        return {"answer": "stopped"}

    b.on("stop_turn", stop_here)
    leases = ConversationLeases(client_a, prefix, "proc-a", ttl_s=30.0, renew_s=10.0)
    try:
        assert await a.start(HANG_GUARD_S) and await b.start(HANG_GUARD_S)
        answer = await a.ask("proc-b", "stop_turn", {"turn_id": "turn-1", "user_id": "U1"})
        assert answer == {"answer": "stopped"}
        assert stops == [{"turn_id": "turn-1", "user_id": "U1"}]

        async def queued() -> None:
            raise AssertionError("nobody holds the conversation")

        assert await leases.acquire("conv-1", leases.holder_id("turn-1"), queued) is False
        assert leases.token("conv-1")  # the lease's script ran on the master, with its fencing token
        async with direct(deployment.master) as master:
            names = {c.get("name") for c in await master.client_list()}
        assert {"botgateway:proc-a", "botgateway:proc-b"} <= names  # the clients' options reached the master
    finally:
        await leases.aclose()
        await a.aclose()
        await b.aclose()
        await client_a.aclose()
        await client_b.aclose()


async def test_rediss_sentinel_speaks_tls_to_the_sentinel_and_to_the_master(tmp_path: Path) -> None:
    async with deploy(tmp_path, tls=True) as deployment:  # neither listens without TLS
        prefix = unique_prefix()
        url = deployment.sentinel.url()
        assert url.startswith("rediss+sentinel://") and "ssl_ca_certs=" in url
        store = RedisStore(url, prefix)
        try:
            await store.open()
            await store.append_turn("conv-1", turn("t1"))
            assert [t.turn_id for t in await store.load_turns("conv-1")] == ["t1"]
        finally:
            await store.close()
        async with direct(deployment.master) as master:
            assert await master.hexists(conversation_keys(prefix, "conv-1").turns, "t1")


async def test_an_unreachable_sentinel_is_a_store_error_that_names_the_url_without_its_passwords() -> None:
    url = (f"redis+sentinel://:{MASTER_PASSWORD}@127.0.0.1:{closed_port()}/{SERVICE}"
           f"?sentinel_password={SENTINEL_PASSWORD}")
    store = RedisStore(url, unique_prefix())
    try:
        with pytest.raises(StoreError) as caught:
            await store.open()
    finally:
        await store.close()
    message = str(caught.value)
    assert "memory.redis_url" in message and f"/{SERVICE}" in message
    assert MASTER_PASSWORD not in message and SENTINEL_PASSWORD not in message


# --- failover ---------------------------------------------------------------------------------


async def _until_the_replica_could_be_promoted(deployment: Deployment) -> None:
    """Poll until the Sentinel sees the replica in sync (the processes offer no event for it)."""
    assert deployment.replica is not None
    port = deployment.replica.port
    async with deployment.sentinel.client() as sentinel, asyncio.timeout(HANG_GUARD_S):
        while True:
            known = await sentinel.sentinel_slaves(SERVICE)
            if any(r["port"] == port and r["flags"] == "slave" and r["master-link-status"] == "ok" for r in known):
                return
            await asyncio.sleep(0.1)


async def test_after_a_failover_the_store_works_on_the_promoted_replica(tmp_path: Path) -> None:
    async with deploy(tmp_path, replica=True) as deployment:
        assert deployment.replica is not None
        await _until_the_replica_could_be_promoted(deployment)
        prefix = unique_prefix()
        store = RedisStore(deployment.sentinel.url(), prefix)
        try:
            await store.open()
            await store.append_turn("conv-1", turn("t1"))
            async with direct(deployment.master) as master:
                assert await master.wait(1, int(HANG_GUARD_S * 1000)) == 1  # the replica has the turn

            async with deployment.sentinel.client() as sentinel, sentinel.pubsub() as events:
                await events.subscribe("+switch-master")
                await events.get_message(timeout=HANG_GUARD_S)  # the subscription's confirmation
                deployment.master.kill()
                assert await sentinel.execute_command("SENTINEL FAILOVER", SERVICE)
                async with asyncio.timeout(HANG_GUARD_S):
                    switched = None
                    while switched is None:
                        switched = await events.get_message(ignore_subscribe_messages=True, timeout=HANG_GUARD_S)
            assert switched["data"].split()[-1] == str(deployment.replica.port)

            # The store's connection to the dead master is replaced by one to the master the Sentinel names now.
            assert [t.turn_id for t in await store.load_turns("conv-1")] == ["t1"]
            await store.append_turn("conv-1", turn("t2"))
            assert [t.turn_id for t in await store.load_turns("conv-1")] == ["t1", "t2"]
            async with direct(deployment.replica) as promoted:
                assert (await promoted.execute_command("ROLE"))[0] == "master"
                assert await promoted.hexists(conversation_keys(prefix, "conv-1").turns, "t2")
        finally:
            await store.close()
