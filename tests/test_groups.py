"""Group resolution, the core's side: which groups the policy names, and the cache both platform resolvers share."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from botgateway.access import (
    DINGTALK_DEPT_PREFIX,
    NO_GROUPS,
    SLACK_GROUP_PREFIX,
    CachedLookup,
    GroupLookupFailed,
    policy_groups,
    resolve_message,
)
from botgateway.config import AccessConfig
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _policy() -> AccessConfig:
    return AccessConfig.model_validate({
        "default_role": "viewer",
        "roles": {
            "oncall": {"members": ["slack:S0ONCALL", "slack:U01ADMIN", "dingtalk:dept:42"], "tools": ["*"]},
            "dba": {"members": ["dingtalk:dept:7", "slack:S0DBA", "slack:S*", "dingtalk:dept:*"], "tools": ["db_*"]},
            "viewer": {"tools": ["find_server"]},
        },
    })


def test_policy_groups_are_the_group_ids_roles_list_for_one_platform() -> None:
    policy = _policy()
    assert policy_groups(policy, SLACK_GROUP_PREFIX) == {"slack:S0ONCALL", "slack:S0DBA"}  # no user ids, no globs
    assert policy_groups(policy, DINGTALK_DEPT_PREFIX) == {"dingtalk:dept:42", "dingtalk:dept:7"}
    assert policy_groups(None, SLACK_GROUP_PREFIX) == frozenset()  # the default policy names no group


def test_the_cache_ttl_is_configured_and_validated() -> None:
    assert AccessConfig().group_cache_s == 300
    assert AccessConfig.model_validate({"group_cache_s": 60}).group_cache_s == 60
    with pytest.raises(ValueError, match="group_cache_s"):
        AccessConfig.model_validate({"group_cache_s": 0})


async def test_answers_are_kept_for_the_ttl_and_fetched_again_after_it() -> None:
    clock, fetched = Clock(), []

    async def fetch(key: str) -> frozenset[str]:
        fetched.append(key)
        return frozenset({f"U{len(fetched)}"})

    lookup: CachedLookup[str] = CachedLookup(fetch, ttl_s=300, what="test", clock=clock)
    assert await lookup.get("S1") == {"U1"}
    clock.now += 299
    assert await lookup.get("S1") == {"U1"}
    assert fetched == ["S1"]
    clock.now += 2
    assert await lookup.get("S1") == {"U2"}
    assert fetched == ["S1", "S1"]


async def test_concurrent_lookups_of_one_key_share_one_call_and_survive_a_cancelled_caller() -> None:
    started, release, calls = asyncio.Event(), asyncio.Event(), 0

    async def fetch(key: str) -> frozenset[str]:
        nonlocal calls
        calls += 1
        started.set()
        await release.wait()
        return frozenset({"U1"})

    lookup: CachedLookup[str] = CachedLookup(fetch, ttl_s=300, what="test")
    first = asyncio.ensure_future(lookup.get("S1"))
    second = asyncio.ensure_future(lookup.get("S1"))
    third = asyncio.ensure_future(lookup.get("S1"))
    await started.wait()  # the call is under way, and all three were scheduled before it
    first.cancel()
    release.set()
    assert await second == {"U1"} and await third == {"U1"}
    assert calls == 1
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_failed_lookup_means_no_members_warns_once_and_is_retried_after_a_short_while() -> None:
    clock, calls = Clock(), 0

    async def fetch(key: str) -> frozenset[str]:
        nonlocal calls
        calls += 1
        raise GroupLookupFailed("add the usergroups:read scope", reason="missing_scope")

    lookup: CachedLookup[str] = CachedLookup(fetch, ttl_s=300, failure_ttl_s=30, what="slack usergroup", clock=clock)
    with structlog.testing.capture_logs() as logs:
        assert await lookup.get("S1") == frozenset()
        assert await lookup.get("S1") == frozenset()  # remembered: no second call, no second warning
        clock.now += 31
        assert await lookup.get("S1") == frozenset()
    assert calls == 2
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 2  # once per key and period
    assert warnings[0]["event"] == "groups.lookup_failed" and "usergroups:read" in warnings[0]["advice"]


async def test_an_unexpected_error_is_not_a_member_either() -> None:
    async def fetch(key: str) -> frozenset[str]:
        raise RuntimeError("boom")

    lookup: CachedLookup[str] = CachedLookup(fetch, ttl_s=300, what="test")
    with structlog.testing.capture_logs() as logs:
        assert await lookup.get("S1") == frozenset()
    assert [e["reason"] for e in logs if e["log_level"] == "warning"] == ["RuntimeError"]


async def test_resolve_message_puts_the_groups_on_the_message_and_its_tool_context() -> None:
    principal = Principal.of("slack", "U1", team="T1")

    class Oncall:
        async def resolve(self, p: Principal) -> Principal:
            return p.with_groups(frozenset({"slack:S0ONCALL"}))

    ctx = ToolContext(user_id="U1", platform="slack", principal=principal)
    message = InboundMessage(platform="slack", message_id="m", conversation_id="c", text="hi",
                             target=CardTarget(platform="slack", chat_id="C1"), ctx=ctx, principal=principal)
    resolved = await resolve_message(message, Oncall())
    assert resolved.principal is not None and resolved.principal.groups == {"slack:S0ONCALL"}
    assert resolved.ctx.principal == resolved.principal
    assert await resolve_message(message, NO_GROUPS) is message
