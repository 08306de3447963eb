"""Which host is what on an alert card, in-process: the desk's follow-up lookup through a real registry, as the route.

A real gateway and the Slack adapter on the fake Slack (``slack_env``), SQLite;
the desk is given a tool registry whose lookup tools answer from a small
estate, fail, or never answer. :meth:`AlertDesk.aclose` waits for the
background work (the lookups, their redraws, an investigation), so a test
reads the card and the record right after it. The process-level acceptance
test (a joined host named on Slack and DingTalk cards, audited) is the first
test of ``test_alert_lifecycle``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from botgateway.alerts.desk import AlertDesk
from botgateway.alerts.host_lookup import MAX_HOSTS_PER_NOTIFICATION, MAX_LOOKUPS_PER_GROUP
from botgateway.alerts.payload import Notification, parse_notification
from botgateway.alerts.records import AlertCard, card_from_dict, card_key
from botgateway.alerts.route_tools import RouteCall, RouteTools
from botgateway.config import AccessConfig, AlertsConfig
from botgateway.destinations import parse_destination
from botgateway.tooling import Source, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, tool
from botgateway.unprompted import Channels
from tests.alerts.test_alert_cards import CHANNEL, payload
from tests.alerts.test_alert_lifecycle import FINDINGS, respond
from tests.fakes.slack import Message
from tests.fakes.slack_env import Env, slack_env

pytestmark = pytest.mark.timeout(60)

ROUTE_NAME = "critical"
DEST = parse_destination(f"slack:{CHANNEL}")
ACCESS = {
    "roles": {
        "oncall": {"members": ["slack:UONCALL"], "tools": ["*"]},
        "servers_only": {"members": [], "tools": ["find_server"]},
        "blind": {"members": [], "tools": ["list_*"]},
    },
    "default_role": "none",
}
ESTATE = {
    "10.0.1.100": ("prod-db-01", "dba-team"),
    "10.0.1.101": ("prod-db-02", "dba-team"),
    "10.0.2.11": ("prod-web-01", "web-team"),
}
"""Address → (name, owner), as ``tools/sample_inventory.yaml`` has them."""

WEB = "10.0.2.11 → **prod-web-01** (server · static inventory · team web-team)"
"""The joined host's line on the card, as the resource lookup identifies it."""
DB = "10.0.1.100 → **prod-db-01** (server · static inventory · team dba-team)"
"""The first alert's host's line."""


def alerts_config(*, investigate: bool = False, role: str = "oncall") -> AlertsConfig:
    return AlertsConfig.model_validate({
        "token": "am-webhook-token-0123456789",
        "routes": [{"name": ROUTE_NAME, "match": {"severity": "critical"}, "to": [f"slack:{CHANNEL}"],
                    "investigate": investigate, "role": role}],
    })


def notification(name: str, *, second: str = "10.0.2.11") -> Notification:
    """A recorded payload, its second alert's host (``10.0.1.101`` as recorded) moved to ``second``."""
    return parse_notification(payload(name).replace(b"10.0.1.101", second.encode()))


def many_hosts(count: int) -> Notification:
    """``firing.json`` with ``count`` alerts, each on a host of its own (``10.0.9.1`` …)."""
    body = json.loads(payload("firing"))
    template = body["alerts"][0]
    body["alerts"] = [
        {**template, "fingerprint": f"f{n:015x}", "labels": {**template["labels"], "instance": f"10.0.9.{n}:9100"}}
        for n in range(1, count + 1)
    ]
    return parse_notification(json.dumps(body).encode())


# --- the lookup tools ------------------------------------------------------------------------------------------------


class Estate:
    """Lookup tools over :data:`ESTATE`, remembering who called them with what."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, ToolContext]] = []

    def find_resource(self) -> Tool:
        async def find_resource(query: str, ctx: ToolContext) -> ToolOutput:
            """Find what owns an IP.

            Args:
                query: The IP.
            """
            self.calls.append(("find_resource", query, ctx))
            found = [{"kind": "server", "provider": "inventory", "id": ESTATE[query][0], "name": ESTATE[query][0],
                      "owner": ESTATE[query][1], "tags": {}}] if query in ESTATE else []
            return ToolOutput(content=f"{len(found)} match(es)", summary=f"{len(found)} found",
                              data={"kind": "resource_search", "resources": found},
                              sources=(Source(provider="inventory", label="static inventory"),))

        return tool(find_resource, read_only=True)

    def find_server(self) -> Tool:
        async def find_server(query: str, ctx: ToolContext) -> ToolOutput:
            """Find a server by IP.

            Args:
                query: The IP.
            """
            self.calls.append(("find_server", query, ctx))
            found = [{"provider": "inventory", "instance_id": ESTATE[query][0], "name": ESTATE[query][0],
                      "tags": {"owner": ESTATE[query][1]}}] if query in ESTATE else []
            return ToolOutput(content=f"{len(found)} match(es)", summary=f"{len(found)} found",
                              data={"kind": "server_search", "servers": found})

        return tool(find_server, read_only=True)

    def broken(self, *, stalls: Iterable[str] = ()) -> Tool:
        """A ``find_resource`` that fails for every host, and never answers for those in ``stalls`` (its timeout
        ends the call)."""
        stalled = set(stalls)

        async def find_resource(query: str, ctx: ToolContext) -> ToolOutput:
            """Find what owns an IP.

            Args:
                query: The IP.
            """
            self.calls.append(("find_resource", query, ctx))
            if query in stalled:
                await asyncio.Event().wait()
            raise ToolError("the inventory service is not reachable")

        return tool(find_resource, read_only=True, timeout_s=0.2)

    def asked(self) -> list[str]:
        return [query for _, query, _ in self.calls]


# --- the desk ----------------------------------------------------------------------------------------------------------


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for environment in slack_env(tmp_path, responder=respond, access_config=ACCESS):
        yield environment


Desks = Callable[..., Any]


@pytest.fixture
def desk_on(env: Env) -> Desks:
    """``async with desk_on(tools, ...) as desk``: a desk on the one Store (a restart between two is harmless), whose
    background work has ended when the block does."""

    @asynccontextmanager
    async def make(tools: list[Tool] | None, *, investigate: bool = False, role: str = "oncall") -> AsyncIterator[AlertDesk]:
        channels = Channels(env.gateway, {"slack": env.adapter}, {"slack": env.adapter.sink}, {})
        desk = AlertDesk(config=alerts_config(investigate=investigate, role=role), store=env.store, budget=env.budget,
                         channels=channels, read_only_tools=lambda: frozenset({"find_server"}),
                         instance_id=env.gateway.instance_id,
                         tools=ToolRegistry(tools) if tools is not None else None,
                         access=AccessConfig.model_validate(ACCESS))
        try:
            yield desk
        finally:
            await desk.aclose()

    return make


async def deliver(desk_on: Desks, tools: list[Tool] | None, *notifications: Notification, **options: Any) -> None:
    """Deliver ``notifications`` in turn, then wait for everything they started (lookups, redraws)."""
    config = alerts_config(**options)
    async with desk_on(tools, **options) as desk:
        for n in notifications:
            await desk.deliver(config.routes[0], DEST, n)


async def record(env: Env) -> AlertCard:
    data = await env.store.get_document(card_key(str(DEST), notification("firing").group_key))
    assert data is not None
    return card_from_dict(data)


def cards(env: Env) -> list[Message]:
    return [m for m in env.fake.channel_messages(CHANNEL) if m.thread_ts is None]


def the_card(env: Env) -> str:
    [card] = cards(env)
    return card.text


def line_after(text: str, needle: str) -> str:
    """The line that follows the first line holding ``needle``."""
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if needle in line)
    return lines[index + 1] if index + 1 < len(lines) else ""


# --- tests ---------------------------------------------------------------------------------------------------------------


async def test_a_host_joining_a_firing_group_is_named_on_its_card_looked_up_as_the_route_and_audited(
    env: Env, desk_on: Desks,
) -> None:
    estate = Estate()
    async with desk_on([estate.find_resource()]) as desk:
        config = alerts_config()
        await desk.deliver(config.routes[0], DEST, notification("firing"))
        await desk.deliver(config.routes[0], DEST, notification("joined"))

    text = the_card(env)
    # Each host is named right under its alert's line, the first alert's as well as the one that joined.
    assert line_after(text, "instance=10.0.2.11:9100").strip().endswith(WEB), text
    assert line_after(text, "instance=10.0.1.100:9100").strip().endswith(DB), text
    assert len(cards(env)) == 1 and len(env.fake.calls_of("chat.postMessage")) == 1
    # Each host was asked once, as the route's principal holding its role, where the card is.
    assert sorted(estate.asked()) == ["10.0.1.100", "10.0.2.11"]
    for _, _, ctx in estate.calls:
        assert ctx.principal is not None and ctx.principal.id == f"alerts:{ROUTE_NAME}"
        assert ctx.roles == {"oncall"} and ctx.grant is not None and ctx.chat_id == CHANNEL
    card = await record(env)
    assert [(h.host, h.state, h.name) for h in card.hosts] == [
        ("10.0.1.100", "found", "prod-db-01"), ("10.0.2.11", "found", "prod-web-01")]
    assert card.host_lookups == 2

    audited = [r for r in await env.store.audit_records() if r.principal == f"alerts:{ROUTE_NAME}"]
    calls = [c for r in audited for c in r.tool_calls]
    assert sorted(c["arguments"]["query"] for c in calls) == ["10.0.1.100", "10.0.2.11"]
    assert all(c["name"] == "find_resource" and c["ok"] is True for c in calls)
    assert all(r.role == "oncall" and r.channel == CHANNEL and r.outcome == "done" for r in audited)
    assert any("10.0.2.11" in r.question for r in audited)


async def test_a_lookup_that_fails_or_times_out_leaves_the_card_as_it_was_and_a_later_notification_asks_again(
    env: Env, desk_on: Desks,
) -> None:
    broken = Estate()
    # 10.0.1.100's lookup fails; 10.0.2.11's never answers and ends at its timeout.
    await deliver(desk_on, [broken.broken(stalls=["10.0.2.11"])], notification("firing"), notification("joined"))

    text = the_card(env)
    assert "instance=10.0.1.100:9100" in text and "instance=10.0.2.11:9100" in text  # the alerts, as ever
    assert "→" not in text and "prod-" not in text, text  # and nothing about their hosts
    # No edit of its own: the post, its final edit, and the joined alert's edit, as without any lookup.
    assert len(env.fake.calls_of("chat.postMessage")) == 1 and len(env.fake.calls_of("chat.update")) == 2
    card = await record(env)
    assert sorted((h.host, h.state) for h in card.hosts) == [("10.0.1.100", "failed"), ("10.0.2.11", "failed")]
    audited = [c for r in await env.store.audit_records() for c in r.tool_calls if r.principal == f"alerts:{ROUTE_NAME}"]
    assert sorted(c["arguments"]["query"] for c in audited) == ["10.0.1.100", "10.0.2.11"]
    assert all(c["ok"] is False for c in audited)
    assert {c["arguments"]["query"]: c["summary"] for c in audited}["10.0.2.11"].startswith("timed out")

    # The inventory is back: Alertmanager's next notification of the group looks the failed hosts up again.
    estate = Estate()
    await deliver(desk_on, [estate.find_resource()], notification("repeat"))
    text = the_card(env)
    assert WEB in text and DB in text, text
    assert sorted(estate.asked()) == ["10.0.1.100", "10.0.2.11"] and (await record(env)).host_lookups == 4


async def test_lookups_are_bounded_per_notification_and_per_group(env: Env, desk_on: Desks) -> None:
    broken = Estate()
    seven = many_hosts(7)
    per_notification = []
    for _ in range(5):  # every lookup fails, so every notification asks again, while the group's lookups last
        before = len(broken.calls)
        await deliver(desk_on, [broken.broken()], seven)
        per_notification.append(len(broken.calls) - before)

    assert per_notification == [MAX_HOSTS_PER_NOTIFICATION] * 4 + [0], per_notification
    assert sum(per_notification) == MAX_LOOKUPS_PER_GROUP
    # Hosts never asked go before those asked again: all seven were asked by the second notification.
    assert set(broken.asked()[:7]) == {f"10.0.9.{n}" for n in range(1, 8)}
    data = await env.store.get_document(card_key(str(DEST), seven.group_key))
    assert data is not None and card_from_dict(data).host_lookups == MAX_LOOKUPS_PER_GROUP


async def test_an_investigated_card_shows_its_host_once_the_investigation_has_ended(
    env: Env, desk_on: Desks,
) -> None:
    estate = Estate()
    await deliver(desk_on, [estate.find_resource()], notification("firing"), investigate=True)

    text = the_card(env)
    # Whichever came first (the lookup or the investigation's final), the finished card shows both.
    assert FINDINGS in text and DB in text and "Investigating" not in text, text
    assert not cards(env)[0].buttons() and estate.asked() == ["10.0.1.100"]


async def test_a_role_without_the_resource_lookup_uses_find_server_and_a_role_without_either_looks_nothing_up(
    env: Env, desk_on: Desks,
) -> None:
    estate = Estate()
    lookups = [estate.find_resource(), estate.find_server()]
    await deliver(desk_on, lookups, notification("firing"), notification("joined"), role="servers_only")
    text = the_card(env)
    assert WEB in text and DB in text, text  # a server search says as much: a server, where it lives, its owner tag
    assert {name for name, _, _ in estate.calls} == {"find_server"}

    estate.calls.clear()
    other = many_hosts(2)
    await deliver(desk_on, lookups, other, role="blind")  # may list, not look up: nothing is called, or audited
    assert estate.calls == []
    audited = [r for r in await env.store.audit_records() if r.principal == f"alerts:{ROUTE_NAME}"]
    assert {c["name"] for r in audited for c in r.tool_calls} == {"find_server"}


async def test_route_tools_end_a_call_at_their_own_timeout_and_run_nothing_the_role_may_not(env: Env) -> None:
    estate = Estate()

    async def never(query: str) -> str:
        """Never answers (its registry timeout is far away).

        Args:
            query: The IP.
        """
        await asyncio.Event().wait()
        return query

    registry = ToolRegistry([tool(never, name="find_resource", read_only=True), estate.find_server()],
                            default_timeout_s=300)
    tools = RouteTools(registry, access=AccessConfig.model_validate(ACCESS), audit=env.store, timeout_s=0.1)
    target = env.adapter.channel_target(CHANNEL, locale="en")
    narrow = alerts_config(role="servers_only").routes[0]
    calls = [RouteCall("find_resource", {"query": "10.0.2.11"}), RouteCall("find_server", {"query": "10.0.2.11"})]

    timed_out, _ = await tools.call(alerts_config().routes[0], target, calls, purpose="test", conversation_id="c")
    refused, found = await tools.call(narrow, target, calls, purpose="test", conversation_id="c")

    assert not timed_out.ok and timed_out.error == "timed out after 0.1 s"
    assert not refused.ok and "not allowed" in refused.error and found.ok
    audited = [r for r in await env.store.audit_records() if r.principal == f"alerts:{ROUTE_NAME}"]
    # Two records: both calls of the first, only the call that ran of the second.
    assert [[c["name"] for c in r.tool_calls] for r in audited] == [["find_resource", "find_server"], ["find_server"]]
