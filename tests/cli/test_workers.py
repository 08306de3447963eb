"""``botgateway run --workers N``: real worker processes under a real supervisor.

With Redis, two workers each open their own Socket Mode connection to the fake
Slack, share the HTTP port, run under ``<id>-w<i>`` and answer; SIGTERM to the
supervisor reaches both, and a supervisor killed outright still takes them
down. SQLite is refused up front. The supervisor's restart and give-up rules
are checked with tiny worker programs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from botgateway.backoff import Backoff
from botgateway.cli.supervisor import Supervisor
from botgateway.stores.redis import RedisStore
from tests.cli.cli_process import run_cli
from tests.cli.gateway_process import GatewayProcess, free_port, gateway_config, start_gateway
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_env import answer_of
from tests.fakes.stores import REDIS_URL
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(180)

ANSWER = "db-3 is running in cn-shanghai and owned by the payments team."


@pytest.fixture
async def services() -> AsyncIterator[tuple[FakeSlack, ScriptedLLMServer]]:
    async with FakeSlack() as fake, ScriptedLLMServer(responder=lambda body: Script.text(ANSWER, delay_s=0.01)) as llm:
        yield fake, llm


async def two_workers(tmp_path: Path, fake: FakeSlack, llm: ScriptedLLMServer, prefix: str) -> GatewayProcess:
    config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake, http_port=free_port(),
                            memory={"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
                            gateway={"instance_id": "pod-7", "drain_s": 20}, metrics={"enabled": True})
    gateway = await start_gateway(tmp_path, config, "--workers", "2")
    await fake.wait_for(lambda: len(fake.sockets) == 2, 90)
    return gateway


async def exited(pid: int) -> None:
    """Wait until process ``pid`` (not our child) has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, ended.set)  # a pidfd turns readable when its process ends
    try:
        await asyncio.wait_for(ended.wait(), 60)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def turns_counted(gateway: GatewayProcess) -> float:
    """``botgateway_turns_total`` summed over its labels, as one scrape of ``/metrics`` shows it."""
    async with aiohttp.ClientSession() as http, http.get(f"{gateway.probe_url}/metrics") as response:
        text = await response.text()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "botgateway_turns_total")


async def test_two_workers_connect_answer_and_stop_with_the_supervisor(tmp_path: Path, services: Any, redis_prefix: str) -> None:
    fake, llm = services
    gateway = await two_workers(tmp_path, fake, llm, redis_prefix)
    try:
        await gateway.wait_readyz(200)  # both bind the HTTP port; either answers
        store = RedisStore(REDIS_URL, redis_prefix)
        try:
            assert await store.live_instances() == {"pod-7-w0", "pod-7-w1"}
        finally:
            await store.close()
        event = fake.mention("which server is db-3?", channel="C1")
        await fake.wait_ack(await fake.push(fake.event_payload(event)))
        await fake.wait_for(lambda: any(answer_of(m.markdown()) == ANSWER and not m.buttons()
                                        for m in fake.channel_messages("C1")), 30)
        # One worker answered; once its turn is counted, whichever worker a scrape of the shared port reaches shows it.
        async with asyncio.timeout(30):
            while await turns_counted(gateway) != 1.0:
                await asyncio.sleep(0.05)  # paces the scrapes only; the condition is what they show
        assert [await turns_counted(gateway) for _ in range(8)] == [1.0] * 8
        pids = gateway.worker_pids()

        gateway.signal(signal.SIGTERM)
        assert await gateway.wait(90) == 0
    finally:
        await gateway.kill()
    assert len(pids) == 2 and not fake.sockets
    for pid in pids:
        await exited(pid)  # waited for by the supervisor: gone already
    assert "running 2 worker processes" in gateway.output()


async def test_workers_drain_and_exit_when_their_supervisor_is_killed(tmp_path: Path, services: Any, redis_prefix: str) -> None:
    fake, llm = services
    gateway = await two_workers(tmp_path, fake, llm, redis_prefix)
    try:
        pids = gateway.worker_pids()
        gateway.signal(signal.SIGKILL)
        await gateway.wait(30)
        for pid in pids:
            await exited(pid)
    finally:
        await gateway.kill()
    assert len(pids) == 2 and not fake.sockets


def test_more_than_one_worker_on_sqlite_is_refused_naming_redis(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "llm: {provider: demo}\nadapters: {terminal: {enabled: false}, slack: {enabled: true, bot_token: xoxb-1, app_token: xapp-1}}\n"
    )
    result = run_cli("run", "-c", "config.yaml", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "config.yaml: --workers: 2 worker processes need a store they share, and SQLite is one process's: "
        "set memory.store: redis and memory.redis_url (redis://host:6379/0), or run one worker"
    )


def test_check_config_refuses_and_warns_like_run(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "gateway: {workers: 11}\nmemory: {store: redis}\n"
        "adapters: {slack: {enabled: true, bot_token: xoxb-1, app_token: xapp-1}}\n"
    )
    refused = run_cli("check-config", "-c", "config.yaml", cwd=tmp_path)
    (tmp_path / "config.yaml").write_text(
        "gateway: {workers: 4, replicas: 3}\nmemory: {store: redis}\n"
        "adapters: {slack: {enabled: true, bot_token: xoxb-1, app_token: xapp-1}}\n"
    )
    warned = run_cli("check-config", "-c", "config.yaml", cwd=tmp_path)
    assert refused.returncode == 1
    assert "Slack allows 10 per app: use at most 10 workers, or adapters.slack.mode: http" in refused.stderr
    assert warned.returncode == 0, warned.stderr
    assert "3 replicas × 4 workers open 12 Slack Socket Mode connections" in warned.stderr
    assert "the terminal chat cannot run with 4 worker processes" in warned.stderr


# --- the supervisor's rules, with tiny worker programs ------------------------------------------------

WORKER = """
import os, signal, socket, sys
lives = f"{sys.argv[1]}-{sys.argv[2]}"
life = len(open(lives).readlines()) if os.path.exists(lives) else 0
open(lives, "a").write("life\\n")
if sys.argv[3] == "never-starts":
    sys.exit(1)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
os.write(0, b"started\\n")
with socket.create_connection(("127.0.0.1", int(sys.argv[4]))) as tell:
    tell.sendall(f"{sys.argv[2]} {life}\\n".encode())
    if life == 0 and sys.argv[2] == "0":
        sys.exit(1)  # worker 0 dies once after it served
    signal.pause()
"""
"""A worker: notes each life in a file, reports started (or not), tells the test, and dies once or waits for SIGTERM."""


async def test_a_worker_that_dies_after_serving_is_restarted(tmp_path: Path) -> None:
    lives: asyncio.Queue[str] = asyncio.Queue()

    async def told(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await lives.put((await reader.readline()).decode().strip())
        writer.close()

    server = await asyncio.start_server(told, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    log = tmp_path / "lives"
    supervisor = Supervisor(lambda i: [sys.executable, "-c", WORKER, str(log), str(i), "serves", str(port)], 2,
                            backoff=Backoff(base_s=0.01, jitter=(1.0, 1.0)))
    running = asyncio.ensure_future(supervisor.run())
    try:
        seen = {await asyncio.wait_for(lives.get(), 60) for _ in range(3)}
        assert seen == {"0 0", "1 0", "0 1"}  # worker 0 came back for a second life; worker 1 kept its first
        supervisor.stop()
        assert await asyncio.wait_for(running, 60) == 0
    finally:
        running.cancel()
        server.close()
        await server.wait_closed()
    assert [Path(f"{log}-{i}").read_text().count("life") for i in (0, 1)] == [2, 1]


async def test_the_supervisor_gives_up_on_a_worker_that_never_starts(tmp_path: Path) -> None:
    log = tmp_path / "lives"
    supervisor = Supervisor(lambda i: [sys.executable, "-c", WORKER, str(log), str(i), "never-starts", "0"], 1,
                            backoff=Backoff(base_s=0.01, jitter=(1.0, 1.0)), start_attempts=3)
    assert await asyncio.wait_for(supervisor.run(), 60) == 1
    assert Path(f"{log}-0").read_text().count("life") == 3
