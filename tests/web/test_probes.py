"""The gateway's HTTP server over real HTTP: /healthz, /readyz against real stores, errors in JSON, shared ports."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from botgateway.cli.run import run
from botgateway.config import ConfigError, parse_config
from botgateway.http import HttpServer, Readiness, probe_routes
from botgateway.stores.redis import RedisStore
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tests.ports import closed_port


@dataclass
class Adapter:
    """An adapter as readiness sees it: a name and whether it is connected."""

    name: str
    connected: bool = True


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    yield store
    await store.close()


async def serve(readiness: Readiness, *routes: web.RouteDef) -> HttpServer:
    server = HttpServer("127.0.0.1", 0)
    server.add_routes(probe_routes(readiness))
    server.add_routes(routes)
    await server.start()
    return server


async def get(url: str, method: str = "GET", **kwargs: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, url, **kwargs) as response:
            return response.status, await response.json(), dict(response.headers)


async def test_ready_when_started_the_store_answers_and_every_adapter_is_connected(sqlite_store: SqliteStore) -> None:
    readiness = Readiness(sqlite_store)
    readiness.watch(Adapter("slack"))
    server = await serve(readiness)
    try:
        starting = await get(f"{server.url}/readyz")
        readiness.mark_started()
        ready = await get(f"{server.url}/readyz")
        alive = await get(f"{server.url}/healthz")
    finally:
        await server.aclose()
    assert starting[0] == 503 and starting[1]["failed"] == ["started"]
    assert ready[0] == 200
    assert ready[1] == {"ready": True, "failed": [], "checks": {"started": "ok", "draining": "ok", "store": "ok", "slack": "ok"}}
    assert alive[:2] == (200, {"alive": True})


async def test_ready_with_a_reachable_redis() -> None:
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix)
    await store.open()
    readiness = Readiness(store)
    readiness.mark_started()
    server = await serve(readiness)
    try:
        status, body, _ = await get(f"{server.url}/readyz")
    finally:
        await server.aclose()
        await store.close()
        await purge_prefix(prefix)
    assert status == 200 and body["checks"]["store"] == "ok"


async def test_not_ready_when_redis_is_unreachable_and_the_body_keeps_its_password() -> None:
    store = RedisStore(f"redis://:hunter2-secret@127.0.0.1:{closed_port()}/0", unique_prefix())
    readiness = Readiness(store)
    readiness.mark_started()
    server = await serve(readiness)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/readyz") as response:
                status, text = response.status, await response.text()
        alive, _, _ = await get(f"{server.url}/healthz")
    finally:
        await server.aclose()
        await store.close()
    assert status == 503
    body = json.loads(text)
    assert body["ready"] is False and body["failed"] == ["store"]
    assert body["checks"]["store"].startswith("not answering")
    assert "hunter2" not in text and "127.0.0.1" not in text
    assert alive == 200  # alive all the same: restarting the process would not bring Redis back


async def test_not_ready_while_draining_or_while_an_adapter_is_disconnected(sqlite_store: SqliteStore) -> None:
    slack, dingtalk = Adapter("slack"), Adapter("dingtalk", connected=False)
    readiness = Readiness(sqlite_store)
    readiness.watch(slack)
    readiness.watch(dingtalk)
    readiness.mark_started()
    server = await serve(readiness)
    try:
        disconnected = await get(f"{server.url}/readyz")
        dingtalk.connected = True
        connected = await get(f"{server.url}/readyz")
        readiness.start_draining()
        draining = await get(f"{server.url}/readyz")
    finally:
        await server.aclose()
    assert disconnected[0] == 503 and disconnected[1]["failed"] == ["dingtalk"]
    assert disconnected[1]["checks"]["dingtalk"] == "not connected to the platform"
    assert connected[0] == 200
    assert draining[0] == 503 and draining[1]["failed"] == ["draining"]


async def test_unknown_paths_wrong_methods_big_bodies_and_crashes_are_answered_in_json(sqlite_store: SqliteStore) -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"bytes": len(await request.read())})

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("password=hunter2 leaked into an exception")

    server = HttpServer("127.0.0.1", 0, max_body_bytes=1000)
    server.add_routes([web.post("/echo", echo), web.get("/broken", broken), *probe_routes(Readiness(sqlite_store))])
    await server.start()
    try:
        missing = await get(f"{server.url}/nope")
        wrong = await get(f"{server.url}/healthz", "POST")
        small = await get(f"{server.url}/echo", "POST", data=b"x" * 1000)
        big = await get(f"{server.url}/echo", "POST", data=b"x" * 1001)
        crashed = await get(f"{server.url}/broken")
        with pytest.raises(RuntimeError, match="before the HTTP server starts"):
            server.add_routes([web.get("/late", echo)])
    finally:
        await server.aclose()
    assert missing[:2] == (404, {"error": "not found", "path": "/nope"})
    assert wrong[0] == 405 and wrong[1]["error"] == "POST is not allowed here; use GET or HEAD"
    assert wrong[2]["Allow"] == "GET,HEAD"
    assert small[:2] == (200, {"bytes": 1000})
    assert big[:2] == (413, {"error": "the request body is larger than 1000 bytes"})
    assert crashed[0] == 500 and crashed[1]["error"].startswith("the request failed unexpectedly (error id ")
    assert "hunter2" not in str(crashed[1])


async def test_workers_share_a_port_and_a_port_another_program_holds_is_refused(sqlite_store: SqliteStore) -> None:
    readiness = Readiness(sqlite_store)
    first = HttpServer("127.0.0.1", 0, reuse_port=True)
    first.add_routes(probe_routes(readiness))
    await first.start()
    second = HttpServer("127.0.0.1", first.port, reuse_port=True)
    second.add_routes(probe_routes(readiness))
    try:
        await second.start()  # the same port, as a second worker binds it
        assert second.port == first.port
    finally:
        await second.aclose()
        await first.aclose()
    with socket.socket() as taken:  # another program, without SO_REUSEPORT
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        refused = HttpServer("127.0.0.1", taken.getsockname()[1], reuse_port=True)
        with pytest.raises(OSError):
            await refused.start()


async def test_run_names_http_port_when_it_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = parse_config(
            {
                "llm": {"provider": "demo"},
                "memory": {"sqlite_path": str(tmp_path / "m.db")},
                "http": {"enabled": True, "host": "127.0.0.1", "port": port},
            },
            env={},
        )
        with pytest.raises(ConfigError) as raised:
            await run(config, stdin_is_tty=False)
    assert raised.value.problems == [f"http.port: cannot listen on 127.0.0.1:{port} (Address already in use); choose another port"]
