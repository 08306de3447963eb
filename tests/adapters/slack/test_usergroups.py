"""Roles whose members are Slack user groups: the resolver on the fake Slack, and end to end through the adapter."""

from __future__ import annotations

import asyncio
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.usergroups import SlackUserGroups
from botgateway.principal import Principal
from tests.adapters.groups import attach_group_resolver
from tests.adapters.log_lines import captured_log
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.fakes.slack_env import slack_env
from tools.demo.script import Script

ONCALL = "slack:S0ONCALL"

ACCESS = {
    "default_role": "viewer",
    "roles": {
        # inventory_lookup is what only on-call engineers are offered
        "oncall": {"members": [ONCALL], "tools": ["find_server", "inventory_lookup"]},
        "viewer": {"tools": ["find_server"]},
    },
}


class Clock:
    """A clock the test moves by hand (no sleeping for a TTL)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _asker(user: str) -> Principal:
    return Principal.of("slack", user, team="T0001")


async def test_members_of_a_group_are_listed_once_per_ttl_and_listed_again_after_it() -> None:
    async with FakeSlack() as fake:
        fake.usergroups = {"S0ONCALL": ["U1", "U3"]}
        clock = Clock()
        resolver = SlackUserGroups(AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url), frozenset({ONCALL}),
                                   ttl_s=300, clock=clock)
        assert (await resolver.resolve(_asker("U1"))).groups == {ONCALL}
        assert (await resolver.resolve(_asker("U2"))).groups == frozenset()
        assert len(fake.calls_of("usergroups.users.list")) == 1
        assert fake.calls_of("usergroups.users.list")[0].args["usergroup"] == "S0ONCALL"

        fake.usergroups["S0ONCALL"] = ["U2"]  # U1 leaves the rotation, U2 joins
        clock.now += 301
        assert (await resolver.resolve(_asker("U1"))).groups == frozenset()
        assert (await resolver.resolve(_asker("U2"))).groups == {ONCALL}
        assert len(fake.calls_of("usergroups.users.list")) == 2


async def test_concurrent_askers_share_one_call_per_group() -> None:
    async with FakeSlack(latency_s=0.05) as fake:
        fake.usergroups = {"S0ONCALL": ["U1"], "S0DBA": ["U2"]}
        resolver = SlackUserGroups(AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url),
                                   frozenset({ONCALL, "slack:S0DBA"}), ttl_s=300)
        resolved = await asyncio.gather(*(resolver.resolve(_asker(u)) for u in ("U1", "U2", "U3", "U1")))
        assert [p.groups for p in resolved] == [{ONCALL}, {"slack:S0DBA"}, frozenset(), {ONCALL}]
        assert sorted(c.args["usergroup"] for c in fake.calls_of("usergroups.users.list")) == ["S0DBA", "S0ONCALL"]


async def test_other_platforms_are_not_looked_up() -> None:
    async with FakeSlack() as fake:
        resolver = SlackUserGroups(AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url), frozenset({ONCALL}), 300)
        asker = Principal.of("dingtalk", "manager42")
        assert await resolver.resolve(asker) is asker
        assert fake.calls_of("usergroups.users.list") == []


async def test_without_the_scope_nobody_is_a_member_and_the_log_says_to_add_it() -> None:
    async with FakeSlack() as fake:
        fake.usergroups = {"S0ONCALL": ["U1"]}
        fake.usergroups_readable = False
        clock = Clock()
        resolver = SlackUserGroups(AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url), frozenset({ONCALL}),
                                   ttl_s=300, clock=clock)
        with captured_log() as lines:
            assert (await resolver.resolve(_asker("U1"))).groups == frozenset()
            assert (await resolver.resolve(_asker("U1"))).groups == frozenset()
        [warning] = lines.problems()
        assert warning["event"] == "groups.lookup_failed" and warning["reason"] == "missing_scope"
        assert "usergroups:read" in warning["advice"]
        assert len(fake.calls_of("usergroups.users.list")) == 1  # the failure is remembered for a while…

        fake.usergroups_readable = True  # …but not for the full TTL: a fixed scope takes effect soon
        clock.now += 31
        assert (await resolver.resolve(_asker("U1"))).groups == {ONCALL}


async def test_an_unknown_group_is_empty_and_named_in_the_log() -> None:
    async with FakeSlack() as fake:
        resolver = SlackUserGroups(AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url), frozenset({ONCALL}), 300)
        with captured_log() as lines:
            assert (await resolver.resolve(_asker("U1"))).groups == frozenset()
        [warning] = lines.problems()
        assert warning["reason"] == "no_such_subteam" and warning["key"] == ONCALL


async def _offered_tools(env: Any, user: str) -> list[str]:
    """Ask as ``user`` and return the tool names the model was offered."""
    env.llm.enqueue(Script.text("ok"))
    before = len(env.llm.requests)
    delivery = await env.push(env.fake.mention("which hosts are down?", user=user))
    outcome = await env.done(delivery)
    assert outcome.outcome == "done", outcome
    [request] = env.llm.requests[before:]
    return sorted(spec["function"]["name"] for spec in request.get("tools", []))


async def test_a_member_of_the_oncall_group_is_offered_the_oncall_tools_and_others_are_not(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS):
        env.fake.usergroups = {"S0ONCALL": ["U1"]}
        attach_group_resolver(env.adapter, env.config)  # as ``botgateway run`` does
        assert await _offered_tools(env, "U1") == ["find_server", "inventory_lookup"]
        assert await _offered_tools(env, "U2") == ["find_server"]
        assert len(env.fake.calls_of("usergroups.users.list")) == 1  # cached for both askers
        assert (await env.adapter.resolve_principal(_asker("U1"))).groups == {ONCALL}


async def test_whoami_shows_the_role_a_group_grants(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS):
        env.fake.usergroups = {"S0ONCALL": ["U1"]}
        attach_group_resolver(env.adapter, env.config)
        delivery = await env.push(env.fake.mention("/whoami", user="U1"))
        assert delivery.submission is not None and delivery.submission.status == "whoami"
        await env.done(delivery)
        [note] = env.fake.ephemerals  # answered to the asker alone
        assert note["user"] == "U1" and "oncall" in note["text"]
        assert env.llm.requests == []


async def test_without_the_scope_a_group_member_gets_the_default_role(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS):
        env.fake.usergroups = {"S0ONCALL": ["U1"]}
        env.fake.usergroups_readable = False
        attach_group_resolver(env.adapter, env.config)
        with captured_log() as lines:
            assert await _offered_tools(env, "U1") == ["find_server"]
        assert any("usergroups:read" in line.get("advice", "") for line in lines.problems())
