"""The alert desk in-process: a real gateway, the Slack adapter on the fake Slack, SQLite, the scripted model.

:meth:`AlertDesk.deliver` returns once the notification is folded and its
card posted or edited, so a test reads the card right after it; an
investigation runs in a task of the desk, and :meth:`AlertDesk.aclose` waits
for it (it is quick: the scripted model answers at once).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botgateway.alerts.desk import AlertDesk
from botgateway.alerts.payload import Notification, parse_notification
from botgateway.alerts.records import AlertCard, card_from_dict, card_key
from botgateway.config import AlertsConfig
from botgateway.destinations import parse_destination
from botgateway.unprompted import Channels
from tests.alerts.test_alert_cards import CHANNEL, payload
from tests.alerts.test_alert_lifecycle import FINDINGS, investigations, respond
from tests.fakes.slack import Message
from tests.fakes.slack_env import Env, slack_env

pytestmark = pytest.mark.timeout(60)

ALERTS = AlertsConfig.model_validate({
    "token": "am-webhook-token-0123456789",
    "routes": [{"name": "critical", "match": {"severity": "critical"}, "to": [f"slack:{CHANNEL}"],
                "investigate": True, "role": "oncall"}],
})
ROUTE = ALERTS.routes[0]
DEST = parse_destination(f"slack:{CHANNEL}")
ACCESS = {"roles": {"oncall": {"members": ["slack:UONCALL"], "tools": ["*"]}}, "default_role": "none"}


def notification(name: str) -> Notification:
    return parse_notification(payload(name))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for environment in slack_env(tmp_path, responder=respond, access_config=ACCESS):
        yield environment


@pytest.fixture
async def desk(env: Env) -> AsyncIterator[AlertDesk]:
    channels = Channels(env.gateway, {"slack": env.adapter}, {"slack": env.adapter.sink}, {})
    # The slack_env's find_server does not say it is read-only; the desk is told which tools are.
    desk = AlertDesk(config=ALERTS, store=env.store, budget=env.budget, channels=channels,
                     read_only_tools=lambda: frozenset({"find_server"}), instance_id=env.gateway.instance_id)
    try:
        yield desk
    finally:
        await desk.aclose()


async def record(env: Env, n: Notification) -> AlertCard:
    data = await env.store.get_document(card_key(str(DEST), n.group_key))
    assert data is not None
    return card_from_dict(data)


def cards(env: Env) -> list[Message]:
    """The top-level messages of the channel (alert cards)."""
    return [m for m in env.fake.channel_messages(CHANNEL) if m.thread_ts is None]


async def test_one_notification_delivered_twice_at_once_is_one_card_and_one_investigation(
    env: Env, desk: AlertDesk,
) -> None:
    firing = notification("firing")
    await asyncio.gather(desk.deliver(ROUTE, DEST, firing), desk.deliver(ROUTE, DEST, firing))
    assert len(cards(env)) == 1
    await desk.aclose()  # the investigation has ended and its outcome is recorded

    card = await record(env, firing)
    assert card.group.repeats == 1 and card.investigation is not None
    assert card.investigation.status == "done" and card.investigation.answer == FINDINGS
    assert len(investigations(env.llm)) == 1 and len(env.fake.calls_of("chat.postMessage")) == 1
    [message] = cards(env)
    assert FINDINGS in message.text and not message.buttons()


async def test_a_card_whose_first_post_failed_is_posted_by_the_next_notification_even_a_repeat(
    env: Env, desk: AlertDesk,
) -> None:
    env.fake.fail("chat.postMessage", "not_in_channel")  # the bot was not invited yet
    firing = notification("firing")
    await desk.deliver(ROUTE, DEST, firing)
    assert cards(env) == [] and (await record(env, firing)).handle is None  # the group is kept, unposted

    await desk.deliver(ROUTE, DEST, firing)  # invited since; Alertmanager repeats the notification
    assert len(cards(env)) == 1 and "HostDown" in cards(env)[0].text


async def test_a_group_whose_first_post_failed_is_investigated_once_its_card_is_posted(
    env: Env, desk: AlertDesk,
) -> None:
    env.fake.fail("chat.postMessage", "not_in_channel")
    await desk.deliver(ROUTE, DEST, notification("firing"))
    assert cards(env) == [] and not env.llm.requests

    joined = notification("joined")  # a second alert joins the group: the card is posted now, and investigated
    await desk.deliver(ROUTE, DEST, joined)
    assert len(cards(env)) == 1
    await desk.aclose()

    card = await record(env, joined)
    assert card.investigation is not None and card.investigation.status == "done"
    assert card.investigation.answer == FINDINGS and len(investigations(env.llm)) == 1
    [message] = cards(env)
    assert FINDINGS in message.text and "10.0.1.101" in message.text and not message.buttons()


async def test_a_finished_investigation_leaves_its_card_finished_and_a_repeat_redraws_it_so(
    env: Env, desk: AlertDesk,
) -> None:
    firing = notification("firing")
    await desk.deliver(ROUTE, DEST, firing)
    await desk.aclose()  # the investigation has ended; nothing was notified since its final

    [settled] = cards(env)
    assert FINDINGS in settled.text and "Investigating" not in settled.text  # its final was drawn as finished
    edits = len(env.fake.calls_of("chat.update"))

    await desk.deliver(ROUTE, DEST, firing)  # the same again: Alertmanager's repeat_interval, hours later
    [redrawn] = cards(env)
    assert len(env.fake.calls_of("chat.update")) == edits + 1 and "repeated ×1" in redrawn.text
    assert FINDINGS in redrawn.text and "Investigating" not in redrawn.text and not redrawn.buttons()
