"""SIGTERM drains a real ``botgateway run`` process: the fake Slack (Socket Mode) and the scripted model on loopback.

The first signal turns readiness false and closes the Socket Mode connection
at once; answers in progress get ``gateway.drain_s`` to finish; what is still
running then ends with a note that the bot restarted; a second signal skips the
wait. Nothing is left looking live.
"""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.gateway_process import GatewayProcess, free_port, gateway_config, start_gateway
from tests.fakes.slack import FakeSlack, Message
from tests.fakes.slack_env import CURSOR, answer_of
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(180)

ANSWER = "web-1 is running in cn-hangzhou. " + " ".join(f"It serves shard {n} of the storefront." for n in range(30))
"""The answer to ``[q]``: streamed over about three seconds."""

RESTARTED = "⏹ Stopped because the bot is restarting. Please ask again."


def respond(body: dict[str, Any]) -> Script:
    """``[q]``: :data:`ANSWER` over about three seconds; ``[slow]``: text for ten minutes (a model that never finishes)."""
    question = str([m for m in body["messages"] if m.get("role") == "user"][-1].get("content") or "")
    if "[slow]" in question:
        return Script(chunks=[role_chunk(), *text_chunks("Still looking. " * 4000, 8), finish_chunk("stop")], delay_s=0.15)
    chunks = text_chunks(ANSWER, 16)
    return Script(chunks=[role_chunk(), *chunks, finish_chunk("stop")], delay_s=3.0 / len(chunks))


@pytest.fixture
async def services() -> AsyncIterator[tuple[FakeSlack, ScriptedLLMServer]]:
    async with FakeSlack() as fake, ScriptedLLMServer(responder=respond) as llm:
        yield fake, llm


async def started(tmp_path: Path, services: tuple[FakeSlack, ScriptedLLMServer], drain_s: float) -> GatewayProcess:
    fake, llm = services
    config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake,
                            http_port=free_port(), gateway={"drain_s": drain_s})
    gateway = await start_gateway(tmp_path, config)
    await gateway.wait_readyz(200)
    return gateway


def card(fake: FakeSlack, event: dict[str, Any]) -> Message:
    [message] = [m for m in fake.channel_messages(event["channel"]) if m.thread_ts == event["ts"]]
    return message


async def ask(fake: FakeSlack, text: str) -> dict[str, Any]:
    event = fake.mention(text, channel="C1")
    await fake.wait_ack(await fake.push(fake.event_payload(event)))
    return event


def looks_final(message: Message) -> bool:
    return CURSOR not in message.markdown() and message.buttons() == []


async def test_sigterm_lets_a_streaming_answer_finish_exactly_after_the_socket_is_closed(tmp_path: Path, services: Any) -> None:
    fake, _llm = services
    gateway = await started(tmp_path, services, drain_s=60)
    try:
        event = await ask(fake, "[q] which server is web-1?")
        await fake.wait_for(lambda: any("web-1 is running" in m.markdown() for m in fake.channel_messages("C1")), 30)
        sockets_at_final: list[int] = []
        fake.watch(lambda msg, change, at: sockets_at_final.append(len(fake.sockets)) if looks_final(msg) else None)

        gateway.signal(signal.SIGTERM)
        await gateway.wait_readyz(503, timeout=30)  # not ready at once, while the answer still streams
        assert await gateway.wait(60) == 0
    finally:
        await gateway.kill()
    message = card(fake, event)
    assert answer_of(message.markdown()) == ANSWER  # finished, exact
    assert looks_final(message) and "restarting" not in message.markdown()
    assert sockets_at_final[:1] == [0]  # the Socket Mode connection closed before the answer was final
    events = [line.get("event") for line in gateway.log_lines()]
    assert events.index("slack.stopped_receiving") < events.index("gateway.drained") < events.index("botgateway.stopped")


async def test_an_answer_still_running_after_drain_s_ends_saying_the_bot_restarted(tmp_path: Path, services: Any) -> None:
    fake, _llm = services
    gateway = await started(tmp_path, services, drain_s=1)
    try:
        event = await ask(fake, "[slow] look at everything")
        await fake.wait_for(lambda: any("Still looking" in m.markdown() for m in fake.channel_messages("C1")), 30)
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait(60) == 0
    finally:
        await gateway.kill()
    message = card(fake, event)
    assert message.markdown().endswith(RESTARTED)
    assert re.match(r"^@\S+\n\n(Still looking\. ?)+", message.markdown())  # the partial answer stays
    assert looks_final(message)
    assert [line for line in gateway.log_lines() if line.get("event") == "gateway.drain_timeout"]


async def test_a_second_sigterm_skips_the_wait(tmp_path: Path, services: Any) -> None:
    fake, _llm = services
    gateway = await started(tmp_path, services, drain_s=600)
    try:
        event = await ask(fake, "[slow] look at everything")
        await fake.wait_for(lambda: any("Still looking" in m.markdown() for m in fake.channel_messages("C1")), 30)
        gateway.signal(signal.SIGTERM)
        await gateway.wait_readyz(503, timeout=30)  # the first signal was taken: it drains
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait(60) == 0  # long before drain_s
    finally:
        await gateway.kill()
    message = card(fake, event)
    assert message.markdown().endswith(RESTARTED) and looks_final(message)
    assert [line for line in gateway.log_lines() if line.get("event") == "gateway.drain_skipped"]
