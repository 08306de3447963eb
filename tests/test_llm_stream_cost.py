"""What a streamed answer costs the event loop: no timer per chunk.

A timer armed and cancelled per chunk (an ``asyncio.timeout`` around every read,
the HTTP library's read timeout) costs a good part of a chunk's CPU when a
process streams thousands of chunks a second; the idle bound is one timer per
stream and reads carry none. The scripted model runs in the same loop and sends
without pauses, so it schedules next to nothing itself.
"""

from __future__ import annotations

import asyncio

from botgateway.model import AssembledRound, LLMClient
from tests.fakes.llm import llm_config
from tests.timer_loop import TimerCountingLoop
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

ANSWER = "".join(f"w{i:03d} " for i in range(400))  # 2,000 characters: 500 chunks of 4


def test_a_streamed_answer_arms_a_few_timers_not_one_per_chunk() -> None:
    async def scenario(loop: TimerCountingLoop) -> tuple[str, int]:
        async with ScriptedLLMServer() as server:
            server.enqueue(Script.text(ANSWER, chunk_size=4))
            client = LLMClient(llm_config(server.base_url))
            try:
                before = loop.timers
                text = ""
                async for item in client.stream([{"role": "user", "content": "go"}]):
                    if isinstance(item, AssembledRound):
                        text = item.text
                return text, loop.timers - before
            finally:
                await client.aclose()

    with asyncio.Runner(loop_factory=TimerCountingLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, TimerCountingLoop)
        text, timers = runner.run(scenario(loop))
    assert text == ANSWER
    assert timers < 50, f"{timers} timers for 500 chunks"  # one per chunk before: more than 500
