"""Redis goes away while three replicas answer: each falls back to its share of the budgets, says so once, and
every answer in flight still arrives whole, with no 429."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.redis_server import RedisServer
from tests.fakes.slack import FakeSlack
from tests.fakes.stores import unique_prefix
from tests.fleet.harness import fleet_config, free_port, post_event, slack_section, start_replica
from tests.fleet.model import answer_of, respond
from tests.fleet.test_fleet_slack import SLACK_TIERS, looks_live
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(300)

_UNREACHABLE = "rate_budget.shared_unreachable"


def slow_answers(body: dict) -> Script:
    """The fleet model's answers, streamed over about eight seconds so Redis can die mid-answer."""
    script = respond(body)
    text = "".join(str((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "") for c in script.chunks
                   if isinstance(c, dict))
    chunks = [role_chunk(), *text_chunks(text, 6), finish_chunk("stop")]
    return Script(chunks=chunks, delay_s=8.0 / len(chunks))


async def test_a_redis_outage_mid_run_falls_back_to_local_shares_and_every_answer_arrives(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    await redis.start()
    fake = FakeSlack(limits=dict(SLACK_TIERS), limit_style="http429")
    await fake.start()
    llm = ScriptedLLMServer(responder=slow_answers, max_recorded=None)
    llm_url = await llm.start()
    prefix = unique_prefix()
    replicas = []
    try:
        for name in ("outage-a", "outage-b", "outage-c"):
            config = fleet_config(name=name, prefix=prefix, llm_url=llm_url, http_port=free_port(),
                                  adapters={"slack": slack_section(fake, free_port())}, redis_url=redis.url)
            replicas.append(await start_replica(tmp_path, config))
        await asyncio.gather(*(r.wait_ready() for r in replicas))
        async with aiohttp.ClientSession() as http:
            threads = []
            for i in range(12):
                event = fake.mention(f"[q {i}] which hosts run in cn-hangzhou?", channel=f"CO{i:02d}", user=f"U{i:02d}")
                await post_event(http, fake, replicas[i % 3], event)
                threads.append((f"CO{i:02d}", str(event["ts"])))

        def showing(i: int) -> bool:
            channel, ts = threads[i]
            return any(f"Answer {i}:" in m.markdown() for m in fake.thread(channel, ts))

        # Mid-run: every answer is being generated, and the first ones show.
        await llm.wait_for_requests(12, timeout=120)
        await fake.wait_for(lambda: any(showing(i) for i in range(12)), timeout=120)
        redis.kill()

        def answered(i: int) -> bool:
            channel, ts = threads[i]
            messages = fake.thread(channel, ts)
            return any(answer_of(i) in m.markdown() for m in messages) and not any(map(looks_live, messages))

        await fake.wait_for(lambda: all(answered(i) for i in range(12)), timeout=120)
        assert fake.throttled() == []
        said = {r.name: sum(1 for line in r.log_lines() if line.get("event") == _UNREACHABLE) for r in replicas}
        assert all(count <= 1 for count in said.values()) and sum(said.values()) >= 1, said
        await redis.start()  # back, so the replicas write what they kept and stop cleanly
    finally:
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        await llm.stop()
        await fake.stop()
        redis.kill()
