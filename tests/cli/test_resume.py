"""A question whose ``botgateway run`` is killed (SIGKILL) mid-answer is answered after the restart: once, in its card.

A real process on the fake Slack (Socket Mode, edit mode) and the scripted
model, its state in SQLite. The model holds the first attempt mid-stream (a
pause of minutes), so the kill lands while the answer streams; the process
started again on the same data (so under the same instance id) resumes the
question at start-up and the model answers it this time.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.stores.base import OpenCard
from botgateway.stores.sqlite import SqliteStore
from tests.cli.gateway_process import free_port, gateway_config, start_gateway
from tests.fakes.slack import FakeSlack, Message
from tests.fakes.slack_env import CURSOR
from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(180)

QUESTION = "which server is 10.0.1.100?"
PARTIAL = "Looking it up in every region. "
ANSWER = "web-1 is 10.0.1.100; it runs nginx in cn-hangzhou."
RESUMED = "Resumed after a restart"


class Model:
    """The first request streams a little, then pauses for ten minutes; every later one answers at once."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, body: dict[str, Any]) -> Script:
        self.asked.append(str([m for m in body["messages"] if m.get("role") == "user"][-1].get("content")))
        if len(self.asked) == 1:
            return Script(chunks=[role_chunk(), *text_chunks(PARTIAL, 8), Pause(600), finish_chunk("stop")])
        return Script.text(ANSWER, chunk_size=8)


@pytest.fixture
async def services() -> AsyncIterator[tuple[FakeSlack, ScriptedLLMServer, Model]]:
    model = Model()
    async with FakeSlack() as fake, ScriptedLLMServer(responder=model) as llm:
        yield fake, llm, model


def shown(message: Message) -> str:
    """Everything the message shows: its text and the text of each of its blocks."""
    texts = [message.text]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                texts.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message.blocks)
    return "\n".join(texts)


async def recorded(db: Path) -> OpenCard:
    """The open card's record once it carries the question (written behind the card, as the answer streams)."""
    store = SqliteStore(db)
    await store.open()
    try:
        for _ in range(500):
            cards = await store.open_cards()
            if len(cards) == 1 and cards[0].resume.get("question"):
                return cards[0]
            await asyncio.sleep(0.02)  # polls the file another process writes: there is no event to await
    finally:
        await store.close()
    raise AssertionError(f"no open card with its question on record: {cards}")


async def test_a_question_killed_mid_answer_is_answered_after_the_restart_once_in_its_card(
    tmp_path: Path, services: Any
) -> None:
    fake, llm, model = services
    config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake, http_port=free_port())
    db = tmp_path / "data" / "state.db"
    first = await start_gateway(tmp_path, config)
    try:
        await first.wait_readyz(200)
        event = fake.mention(QUESTION, channel="C1")
        await fake.wait_ack(await fake.push(fake.event_payload(event)))
        await fake.wait_for(lambda: any(PARTIAL.strip() in shown(m) for m in fake.thread("C1", event["ts"])), 30)
        left = await recorded(db)
        first.signal(signal.SIGKILL)
        assert await first.wait(30) == -signal.SIGKILL
    finally:
        await first.kill()
    [card] = fake.thread("C1", event["ts"])
    assert CURSOR in shown(card) and card.ts == left.card_id  # killed mid-answer: the card still streams

    restarted = await start_gateway(tmp_path, config)
    try:
        await restarted.wait_readyz(200)
        await fake.wait_for(lambda: [ANSWER in shown(m) for m in fake.thread("C1", event["ts"])] == [True], 60)
        restarted.signal(signal.SIGTERM)
        assert await restarted.wait(60) == 0
    finally:
        await restarted.kill()

    # Answered once, saying so, in a new message; the card the killed process left is deleted (the restarted
    # process cannot know what the dead one spent of chat.update: it needs none of it).
    [answer] = fake.thread("C1", event["ts"])
    assert answer.ts != card.ts and [m.ts for m in fake.deleted] == [card.ts]
    assert RESUMED in shown(answer) and PARTIAL.strip() not in shown(answer) and CURSOR not in shown(answer)
    assert not answer.buttons()
    assert model.asked == [QUESTION, QUESTION]
    assert [line for line in restarted.log_lines() if line.get("event") == "gateway.resumed"]

    store = SqliteStore(db)
    await store.open()
    try:
        assert await store.open_cards() == []
        [resumed] = [r for r in await store.audit_records() if r.extra.get("resumed_from") == left.turn_id]
        assert resumed.outcome == "done" and resumed.question == QUESTION
        # History: the killed attempt left none, the resumed one committed once.
        [turn] = await store.load_turns(resumed.conversation_id)
        assert turn.turn_id == resumed.turn_id and turn.messages[0]["content"] == QUESTION
        assert turn.messages[-1]["content"] == ANSWER
    finally:
        await store.close()
