"""One way to connect to ``memory.redis_url``: a ``redis.asyncio`` client for the store, the budget and the fleet.

A direct URL (``redis://``, ``rediss://``, ``unix://``) is read by redis-py.
A Sentinel URL (``redis+sentinel://``, see :mod:`botgateway.redis_url`) gives
a client of the master the Sentinels name: every new connection asks them where
the master is, so after a failover the client's connections (its pipelines,
scripts and pub/sub included) reconnect to the promoted replica. A connection to
a master that was demoted answers ``READONLY``, which redis-py turns into a
lost connection, so it is dropped rather than used.

Each caller passes the options it needs (timeouts, retries, health checks, a
client name); with Sentinel, the timeouts and retries apply to the Sentinels'
connections too, so an unreachable Sentinel is noticed as fast as an
unreachable Redis.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis import DriverInfo
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel

from botgateway.redis_url import DirectUrl, SentinelUrl, parse_redis_url

__all__ = ["CONNECTION_WAIT_S", "MAX_CONNECTIONS", "SentinelMaster", "redis_client"]


class SentinelMaster(aioredis.Redis):
    """A client of the master a Sentinel names; closing it closes its connections to the Sentinels too."""

    # Hides the client's SENTINEL command on purpose: that command is for a Sentinel, never sent to a master.
    sentinel: Sentinel | None = None  # type: ignore[assignment]
    """The Sentinels it asks where the master is (set by :func:`redis_client`)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Close the master's connections, then the Sentinels'."""
        try:
            await super().aclose(close_connection_pool)
        finally:
            if self.sentinel is not None:
                for client in self.sentinel.sentinels:
                    await client.aclose()


MAX_CONNECTIONS = 64
"""Connections one client opens at most; more commands in flight wait for one (pipelines keep this small)."""

CONNECTION_WAIT_S = 20.0
"""Longest wait for a free connection before a command fails (as an unreachable Redis would)."""


def redis_client(
    url: str,
    *,
    decode_responses: bool = True,
    socket_timeout: float | None = None,
    socket_connect_timeout: float | None = 5.0,
    retry: Retry | None = None,
    health_check_interval: float = 30.0,
    client_name: str | None = None,
) -> aioredis.Redis:
    """A client for ``url`` (connected on first use); ValueError, with what is accepted, for a URL of no known form.

    Args:
        url: ``memory.redis_url``.
        decode_responses: Replies as ``str`` rather than ``bytes``.
        socket_timeout: Longest wait for a reply (``None``: no limit).
        socket_connect_timeout: Longest wait for a connection.
        retry: redis-py's retry of a command after a lost connection (``None``: redis-py's default).
        health_check_interval: An idle connection is PINGed before use after this many seconds.
        client_name: The connections' name (``CLIENT LIST``).
    """
    target = parse_redis_url(url)
    options: dict[str, Any] = {
        # Made once here: without it, redis-py reads its own version from the package's metadata (an email-format
        # file, parsed) for every new connection, and a burst of questions opens dozens of them at once.
        "driver_info": DriverInfo(),
        "decode_responses": decode_responses,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout,
        "health_check_interval": health_check_interval,
    }
    if retry is not None:
        options["retry"] = retry
    if client_name is not None:
        options["client_name"] = client_name
    if isinstance(target, DirectUrl):
        # redis-py's default pool raises "Too many connections" past 100 commands in flight; a burst of
        # questions has more than that at once. This pool makes the extra commands wait for a connection.
        pool = aioredis.BlockingConnectionPool.from_url(
            target.url, max_connections=MAX_CONNECTIONS, timeout=CONNECTION_WAIT_S, **options
        )
        return aioredis.Redis.from_pool(pool)
    return _sentinel_master(target, options)


def _sentinel_master(target: SentinelUrl, options: dict[str, Any]) -> SentinelMaster:
    """The master's client, through Sentinels reached with the caller's timeouts and retry and their own credentials."""
    to_sentinels: dict[str, Any] = {
        key: value for key, value in options.items() if key.startswith("socket_") or key == "retry"
    }
    tls: dict[str, Any] = {"ssl": target.tls, **dict(target.tls_options)}
    to_sentinels.update(username=target.sentinel_username, password=target.sentinel_password, **tls)
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=to_sentinels)
    client = sentinel.master_for(
        target.service_name,
        redis_class=SentinelMaster,
        db=target.db,
        username=target.username,
        password=target.password,
        **tls,  # ssl=True: the pool picks its TLS connection class
        **options,
    )
    assert isinstance(client, SentinelMaster)
    client.sentinel = sentinel
    return client
