"""Alertmanager's webhook through a real ``botgateway run``: one card per alert group and destination, investigated.

The gateway runs as a process with the built-in demo model and the sample
inventory, Slack on the fake Slack and DingTalk (AI card) on the fake DingTalk.
The real Alertmanager payloads of ``payloads/`` are posted as Alertmanager
posts them: a group fires, a second alert joins it, the same notification
repeats, and both resolve.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cli.gateway_process import GatewayProcess, free_port, gateway_config, start_gateway
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.slack import FakeSlack, Message
from tests.fleet.harness import dingtalk_section
from tests.paths import REPO

pytestmark = pytest.mark.timeout(180)

PAYLOADS = Path(__file__).parent / "payloads"
TOKEN = "am-webhook-token-0123456789"
CHANNEL = "C0OPS"
GROUP = "cidOpsAlerts=="
SPACE = f"dtv1.card//IM_GROUP.{GROUP}"


def payload(name: str) -> bytes:
    return (PAYLOADS / f"{name}.json").read_bytes()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[GatewayProcess, FakeSlack, FakeDingTalk]]:
    slack, dingtalk = FakeSlack(), FakeDingTalk()
    await slack.start()
    await dingtalk.start()
    port = free_port()
    config = gateway_config(
        tmp_path, llm_url="", fake=slack, http_port=port,
        llm={"provider": "demo", "base_url": "", "api_key": "", "model": "", "max_rounds": 4},
        tools={"inventory": {"enabled": True, "path": str(REPO / "tools" / "sample_inventory.yaml")}},
        access={"roles": {"oncall": {"members": ["slack:UONCALL"], "tools": ["*"]}}, "default_role": "none"},
        alerts={
            "token": TOKEN,
            "basic_auth": {"username": "alertmanager", "password": "am-basic-secret"},
            "routes": [{"name": "critical", "match": {"severity": "critical"},
                        "to": [f"slack:{CHANNEL}", f"dingtalk:{GROUP}"], "investigate": True, "role": "oncall"}],
        },
    )
    config["adapters"]["dingtalk"] = dingtalk_section(dingtalk)
    process = await start_gateway(tmp_path, config)
    try:
        await process.wait_readyz(200)
        yield process, slack, dingtalk
    finally:
        await process.kill()
        await slack.stop()
        await dingtalk.stop()


async def post(process: GatewayProcess, body: bytes, *, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    url = f"{process.probe_url}/alerts/alertmanager"
    sent = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"} if headers is None else headers
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=sent) as response:
        return response.status, await response.json()


def alert_cards(slack: FakeSlack) -> list[Message]:
    return [m for m in slack.channel_messages(CHANNEL) if m.thread_ts is None]


def slack_text(slack: FakeSlack) -> str:
    """Everything the one alert card shows (its markdown blocks: the alert's, then the investigation's)."""
    cards = alert_cards(slack)
    if len(cards) != 1:
        return ""
    return "\n".join(str(b.get("text", "")) for b in cards[0].blocks if b.get("type") == "markdown") or cards[0].text


def dingtalk_text(dingtalk: FakeDingTalk) -> str:
    cards = dingtalk.cards_in(SPACE)
    return cards[0].content if len(cards) == 1 else ""


async def until(fake: FakeSlack | FakeDingTalk, predicate: Callable[[], bool], shown: Callable[[], str],
                timeout: float = 30) -> None:
    """Wait for ``predicate`` on ``fake``; on a timeout, fail with what the card shows."""
    try:
        await fake.wait_for(predicate, timeout=timeout)
    except TimeoutError:
        raise AssertionError(f"the card never got there; it shows:\n{shown()}") from None


async def test_an_alert_group_is_one_card_per_destination_from_firing_to_resolved(
    gateway: tuple[GatewayProcess, FakeSlack, FakeDingTalk],
) -> None:
    process, slack, dingtalk = gateway

    assert (await post(process, payload("firing")))[0] == 200
    # The investigation's tool lines name the host the inventory knows for the alert's instance.
    await until(slack, lambda: "prod-db-01" in slack_text(slack) and not alert_cards(slack)[0].buttons(), lambda: slack_text(slack), 60)
    await until(dingtalk, lambda: "prod-db-01" in dingtalk_text(dingtalk), lambda: dingtalk_text(dingtalk), 60)
    first = slack_text(slack)
    assert "Firing" in first or "🔥" in first
    await until(dingtalk, lambda: dingtalk.cards_in(SPACE)[0].finalized, lambda: dingtalk_text(dingtalk), 60)

    assert (await post(process, payload("joined")))[0] == 200
    second = json.loads(payload("joined"))["alerts"][1]["labels"]["instance"]
    assert second not in slack_text(slack)
    await until(slack, lambda: second in slack_text(slack), lambda: slack_text(slack), 30)
    await until(dingtalk, lambda: second in dingtalk_text(dingtalk), lambda: dingtalk_text(dingtalk), 30)

    assert (await post(process, payload("repeat")))[0] == 200
    await until(slack, lambda: "×1" in slack_text(slack) or "x1" in slack_text(slack), lambda: slack_text(slack), 30)

    assert (await post(process, payload("resolved")))[0] == 200
    await until(slack, lambda: "✅" in slack_text(slack).split("\n")[0], lambda: slack_text(slack), 30)
    await until(dingtalk, lambda: "✅" in dingtalk_text(dingtalk).split("\n")[0], lambda: dingtalk_text(dingtalk), 30)

    # Exactly one card per group and destination, for its whole life; the investigation is still on it.
    assert len(alert_cards(slack)) == 1
    assert len(dingtalk.cards_in(SPACE)) == 1
    for text in (slack_text(slack), dingtalk_text(dingtalk)):
        tool_lines = [line for line in text.splitlines() if "find_resource" in line]
        assert tool_lines and all("prod-db-01" in line for line in tool_lines), text
    assert not [m for m in slack.channel_messages(CHANNEL) if m.thread_ts is not None]  # nothing posted again


async def test_the_receiver_refuses_bad_credentials_and_malformed_bodies(
    gateway: tuple[GatewayProcess, FakeSlack, FakeDingTalk],
) -> None:
    process, slack, _ = gateway
    status, body = await post(process, payload("firing"), headers={"Authorization": "Bearer wrong"})
    assert status == 401 and TOKEN not in json.dumps(body)
    assert (await post(process, payload("firing"), headers={}))[0] == 401
    # Basic auth needs both halves right: the right user with a wrong password, or the reverse, is refused.
    for wrong in (b"alertmanager:not-the-secret", b"intruder:am-basic-secret"):
        basic = base64.b64encode(wrong).decode()
        status, body = await post(process, payload("firing"), headers={"Authorization": f"Basic {basic}"})
        assert status == 401 and "am-basic-secret" not in json.dumps(body), wrong
    basic = base64.b64encode(b"alertmanager:am-basic-secret").decode()
    status, body = await post(process, b'{"version": "4", "groupKey": ', headers={"Authorization": f"Basic {basic}"})
    assert status == 400 and "error" in body
    status, body = await post(process, b'{"version": "4", "status": "firing"}')
    assert status == 400 and "groupKey" in body["error"]
    status, _ = await post(process, b"x" * (2 << 20))
    assert status == 413
    # A header that is not text is a wrong credential like any other, never a crash.
    status, _ = await post(process, payload("firing"), headers={"Authorization": "Bearer \udcff".encode(
        "utf-8", "surrogateescape").decode("latin-1")})
    assert status == 401
    assert not alert_cards(slack)
    assert sum(1 for line in process.log_lines() if line.get("event") == "alerts.bad_payload") == 2


async def test_a_chunked_body_is_read_to_its_end(gateway: tuple[GatewayProcess, FakeSlack, FakeDingTalk]) -> None:
    """Alertmanager's body may arrive in pieces (chunked, or split by the network): it is read whole."""
    process, slack, _ = gateway
    data = json.loads(payload("firing"))
    data["commonAnnotations"]["runbook"] = "r" * 300_000  # far past one read's buffer, well inside the limit

    async def pieces() -> AsyncIterator[bytes]:
        body = json.dumps(data).encode()
        for start in range(0, len(body), 8192):
            yield body[start:start + 8192]

    url = f"{process.probe_url}/alerts/alertmanager"
    async with aiohttp.ClientSession() as http, http.post(
        url, data=pieces(), headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    ) as response:
        assert response.status == 200, await response.text()
    await until(slack, lambda: len(alert_cards(slack)) == 1, lambda: slack_text(slack), 30)
