"""Three real gateway processes share one DingTalk app's 20 QPS card budget through Redis.

Each replica opens its own Stream connection to the fake DingTalk, which hands
the bot messages to the connections in turn, as DingTalk balances an app's
connections; the card API accepts 20 calls per sliding second for the whole
app and answers 403 ``QpsLimit`` past it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.dingtalk import FakeCard, FakeDingTalk, bot_message
from tests.fakes.stores import purge_prefix, unique_prefix
from tests.fleet.harness import Replica, dingtalk_section, fleet_config, free_port, start_replica
from tests.fleet.model import answer_of, respond
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def dingtalk_fleet(tmp_path: Path) -> AsyncIterator[tuple[FakeDingTalk, list[Replica]]]:
    prefix = unique_prefix()
    fake = FakeDingTalk(qps_limit=20)
    await fake.start()
    llm = ScriptedLLMServer(responder=respond, max_recorded=None)
    llm_url = await llm.start()
    replicas: list[Replica] = []
    try:
        for name in ("ding-a", "ding-b", "ding-c"):
            config = fleet_config(name=name, prefix=prefix, llm_url=llm_url, http_port=free_port(),
                                  adapters={"dingtalk": dingtalk_section(fake)})
            replicas.append(await start_replica(tmp_path, config))
        await asyncio.gather(*(r.wait_ready() for r in replicas))
        await fake.wait_for(lambda: len(fake.sockets) == 3, timeout=60)
        yield fake, replicas
    finally:
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        await llm.stop()
        await fake.stop()
        await purge_prefix(prefix)


def _card_of(fake: FakeDingTalk, group: str) -> FakeCard | None:
    cards = fake.cards_in(f"dtv1.card//IM_GROUP.{group}")
    return cards[-1] if cards else None


async def test_thirty_questions_over_three_replicas_stay_within_the_app_qps(
    dingtalk_fleet: tuple[FakeDingTalk, list[Replica]],
) -> None:
    fake, replicas = dingtalk_fleet
    groups = [f"cidFleetGroup{i:03d}==" for i in range(30)]
    # A stalled network: the card calls of all three replicas are held on their way, then arrive together. The
    # fleet counts calls on their way in Redis, so at most a second's worth (20) is ever held, and they land
    # within the limit; paced by the bucket alone, the replicas would go on sending and the burst would be 403'd.
    fake.hold_arrivals()
    for i, group in enumerate(groups):
        data = bot_message(f"[q {i}] 哪些主机在 cn-hangzhou?", conversation_id=group, staff_id=f"staff{i:03d}",
                           webhook=fake.session_webhook(group))
        await fake.push_bot_message(data, connection=i % 3)
    await fake.wait_for(lambda: fake.held >= 20, timeout=60)
    await fake.release_arrivals()

    def done() -> bool:
        cards = [_card_of(fake, group) for group in groups]
        return all(card is not None and card.finalized for card in cards)

    await fake.wait_for(done, timeout=180)
    assert fake.throttled() == 0 and fake.max_card_calls_per_second() == 20
    for i, group in enumerate(groups):
        card = _card_of(fake, group)
        assert card is not None and answer_of(i) in card.content and not card.error, (group, card and card.content)
    busy = {r.name: sum(1 for line in r.log_lines() if line.get("event") == "gateway.turn_ended") for r in replicas}
    assert all(count > 0 for count in busy.values()), busy
