"""Per-asker limits through the gateway: turns per minute, turns in progress, tokens per day.

Real tool loop against the scripted model server, real SQLite store; the
limits' wall clock is injected, so crossing a minute or a day is a step of the
test, never a wait.
"""

from __future__ import annotations

import asyncio
from typing import Any

from botgateway.access import LimitHit
from botgateway.stores.base import AuditRecord
from tests.test_gateway import Harness, _harness
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

NOON = 1_700_006_400.0 + 12 * 3600 + 15  # 12:00:15 UTC on a day boundary's day


def _limits(**values: int) -> dict[str, Any]:
    return {"limits": values}


async def _refusals(h: Harness) -> list[AuditRecord]:
    return [r for r in await h.store.audit_records() if r.outcome.startswith("limit:")]


async def test_turns_per_minute_refuses_with_when_it_resets_and_a_new_minute_admits(tmp_path) -> None:
    now = [NOON]
    server = ScriptedLLMServer(responder=lambda body: Script.text("ok"))
    async for h in _harness(tmp_path, server, sections=_limits(turns_per_minute=2), clock=lambda: now[0]):
        first = await h.submit("one?", conversation="c1")
        second = await h.submit("two?", conversation="c2")
        third = await h.submit("three?", conversation="c3")
        assert (first.status, second.status, third.status) == ("started", "started", "refused")
        assert third.message == "You have asked 2 questions this minute, the most allowed. Please ask again in 45 s."
        await asyncio.wait_for(asyncio.gather(first.done, second.done, third.done), 15)
        assert h.server.request_count == 2  # the refused question never reached the model
        other = await h.submit("bob's?", conversation="c4", user="bob")  # another asker has a count of their own
        assert other.status == "started"
        now[0] += 45  # the next minute
        fourth = await h.submit("four?", conversation="c5")
        assert fourth.status == "started"
        await asyncio.wait_for(asyncio.gather(other.done, fourth.done), 15)
        [hit] = await _refusals(h)
        assert (hit.outcome, hit.user_id, hit.question) == ("limit:turns_per_minute", "alice", "three?")
        assert "45 s" in hit.answer


async def test_concurrent_turns_refuses_while_the_asker_has_one_running(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("ok")

    async for h in _harness(tmp_path, ScriptedLLMServer(responder=responder), sections=_limits(concurrent_turns=1)):
        first = await h.submit("one?", conversation="c1")
        second = await h.submit("two?", conversation="c2")
        assert (first.status, second.status) == ("started", "refused")
        assert "already have 1 question(s) in progress" in second.message
        gate.set()
        await asyncio.wait_for(first.done, 15)
        third = await h.submit("three?", conversation="c3")  # the running one ended: its lease is back
        assert third.status == "started"
        await asyncio.wait_for(third.done, 15)
        assert [r.outcome for r in await _refusals(h)] == ["limit:concurrent_turns"]


async def test_a_queued_question_counts_as_in_progress_and_a_refused_one_holds_nothing(tmp_path) -> None:
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("ok")

    server = ScriptedLLMServer(responder=responder)
    async for h in _harness(tmp_path, server, sections=_limits(concurrent_turns=2), max_queued_per_conversation=0):
        first = await h.submit("one?")
        full = await h.submit("two?")  # the conversation's line is full: refused, and its lease is given back
        assert (first.status, full.status) == ("started", "refused")
        await asyncio.wait_for(full.done, 10)
        other = await h.submit("three?", conversation="c2")
        assert other.status == "started"
        gate.set()
        await asyncio.wait_for(asyncio.gather(first.done, other.done), 15)


async def test_tokens_per_day_refuses_once_the_quota_is_used_until_the_next_utc_day(tmp_path) -> None:
    now = [NOON]
    server = ScriptedLLMServer(responder=lambda body: Script.text("ok", usage=(40, 20)))
    async for h in _harness(tmp_path, server, sections=_limits(tokens_per_day=50), clock=lambda: now[0]):
        first = await h.submit("one?")
        assert first.status == "started"
        await asyncio.wait_for(first.done, 15)  # 60 tokens: over today's 50
        second = await h.submit("two?")
        assert second.status == "refused"
        assert second.message == "You have used today's quota of 50 model tokens. It resets at 00:00 UTC."
        now[0] += 12 * 3600  # past midnight UTC
        third = await h.submit("three?")
        assert third.status == "started"
        await asyncio.wait_for(asyncio.gather(second.done, third.done), 15)
        assert [r.outcome for r in await _refusals(h)] == ["limit:tokens_per_day"]


def test_every_note_says_which_limit_and_when_it_resets_in_both_languages() -> None:
    minute = LimitHit(limit="turns_per_minute", value=6, resets_at=NOON + 45)
    day = LimitHit(limit="tokens_per_day", value=200_000, resets_at=NOON + 12 * 3600 - 15)
    busy = LimitHit(limit="concurrent_turns", value=2, resets_at=None)
    assert minute.note("zh-CN", NOON) == "你这一分钟已经问了 6 个问题，达到上限。请 45 秒后再问。"
    assert "200,000" in day.note("zh-CN", NOON) and "00:00" in day.note("zh-CN", NOON)
    assert "2 个问题正在处理" in busy.note("zh-CN", NOON)
    assert "200,000 model tokens" in day.note("en", NOON)


async def test_a_roles_own_limits_override_the_limits_section_for_its_members(tmp_path) -> None:
    now = [NOON]
    sections = {
        "limits": {"turns_per_minute": 1},
        "access": {
            "default_role": "viewer",
            "roles": {
                "viewer": {"tools": ["*"]},
                "oncall": {"members": ["test:bob"], "tools": ["*"], "limits": {"turns_per_minute": 3}},
            },
        },
    }
    server = ScriptedLLMServer(responder=lambda body: Script.text("ok"))
    async for h in _harness(tmp_path, server, sections=sections, clock=lambda: now[0]):
        alice = [await h.submit(f"alice {n}?", conversation=f"a{n}") for n in range(2)]
        bob = [await h.submit(f"bob {n}?", conversation=f"b{n}", user="bob") for n in range(4)]
        assert [s.status for s in alice] == ["started", "refused"]  # the section's 1 per minute
        assert [s.status for s in bob] == ["started", "started", "started", "refused"]  # oncall's 3
        assert "asked 3 questions this minute" in bob[-1].message
        await asyncio.wait_for(asyncio.gather(*(s.done for s in alice + bob)), 20)


async def test_two_replicas_on_one_store_share_an_askers_counts(tmp_path) -> None:
    now = [NOON]
    gate = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Script:
        await gate.wait()
        return Script.text("ok")

    sections = _limits(turns_per_minute=2, concurrent_turns=1)
    async for one in _harness(tmp_path, ScriptedLLMServer(responder=responder), sections=sections, clock=lambda: now[0]):
        async for two in _harness(tmp_path, ScriptedLLMServer(responder=responder), sections=sections, clock=lambda: now[0]):
            first = await one.submit("one?", conversation="c1")
            busy = await two.submit("two?", conversation="c2")  # the other replica sees the running turn
            assert (first.status, busy.status) == ("started", "refused")
            assert "in progress" in busy.message
            gate.set()
            await asyncio.wait_for(asyncio.gather(first.done, busy.done), 15)
            second = await two.submit("three?", conversation="c3")
            assert second.status == "started"
            await asyncio.wait_for(second.done, 15)
            third = await one.submit("four?", conversation="c4")  # both replicas counted this minute's two
            assert third.status == "refused" and "asked 2 questions this minute" in third.message
            await asyncio.wait_for(third.done, 15)
