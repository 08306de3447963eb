"""Approvals in the core: the desk, who may decide, and the loop waiting for a decision.

The loop runs against the scripted model server with the real SDK, as in
``tests/test_loop.py``; decisions are made the way the gateway makes them, on
the :class:`ApprovalDesk` through :class:`Approvers`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from botgateway.approvals import (
    CODE_QUARANTINE_S,
    MAX_PENDING,
    MAX_SHOWN_ARGUMENTS,
    ApprovalDesk,
    ApprovalVote,
    Approvers,
    parse_command,
)
from botgateway.cards.render import render_markdown
from botgateway.cards.state import CardState
from botgateway.config.access import AccessConfig
from botgateway.events import ApprovalDecided, ApprovalRequested, ToolCallFinished, ToolCallStarted, TurnDone, TurnEvent
from botgateway.grant import Grant
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.principal import Principal
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolRegistry, tool
from tests.fakes.llm import llm_config
from tests.fakes.restart import restart_tool
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer

ASKER = Principal.of("slack", "U1", name="carol")
ADMIN = Principal.of("slack", "UADMIN", name="alice")
POLICY = AccessConfig.model_validate({
    "default_role": "viewer",
    "roles": {
        "admin": {"members": ["slack:UADMIN"], "tools": ["*"], "approve": True},
        "oncall": {"members": ["slack:U1"], "tools": ["*"]},
        "viewer": {"tools": ["find_server"]},
    },
    "approvals": {"tools": ["restart_*"]},
})
TOOLS = ("find_server", "restart_server", "reboot_all")


def _codes(*codes: str) -> Iterator[str]:
    yield from codes


def _desk(*codes: str) -> ApprovalDesk:
    fixed = _codes(*codes)
    return ApprovalDesk(codes=lambda: next(fixed))


async def test_the_desk_gives_each_waiting_call_its_own_code_and_takes_one_decision() -> None:
    desk = _desk("1111", "1111", "2222")
    first = desk.open(turn_id="t", call_id="a", tool="restart_server", arguments={}, asker=ASKER, channel="slack:C1")
    second = desk.open(turn_id="t", call_id="b", tool="restart_server", arguments={}, asker=ASKER, channel="slack:C1")
    assert first is not None and second is not None
    assert (first.request.code, second.request.code) == ("1111", "2222")  # a code in use is never handed out twice
    assert first.request.token != second.request.token
    assert desk.decide("2222", ApprovalVote(approved=True, by=ADMIN), token=first.request.token) == "unknown"  # not its button
    assert desk.decide("#2222", ApprovalVote(approved=True, by=ADMIN), token=second.request.token) == "decided"
    assert second.vote.result().approved and not first.vote.done()
    assert desk.decide("2222", ApprovalVote(approved=False, by=ADMIN)) == "unknown"  # decided once only
    desk.close(first)
    assert desk.waiting("1111") is None and desk.waiting("2222") is None


async def test_a_code_is_not_handed_out_again_for_an_hour_and_closing_never_takes_anothers_code() -> None:
    now = [1000.0]
    fixed = _codes("1111", "1111", "2222", "1111")
    desk = ApprovalDesk(codes=lambda: next(fixed), clock=lambda: now[0])
    first = desk.open(turn_id="t1", call_id="a", tool="x", arguments={}, asker=ASKER, channel="slack:C1")
    assert first is not None
    desk.decide("1111", ApprovalVote(approved=True, by=ADMIN))
    desk.close(first)
    # a late "approve 1111" must not meet a new request: 1111 is skipped while quarantined
    second = desk.open(turn_id="t2", call_id="b", tool="x", arguments={}, asker=ASKER, channel="slack:C1")
    assert second is not None and second.request.code == "2222"
    desk.close(first)  # closing the old request again leaves the new one alone
    assert desk.waiting("2222") == second.request
    now[0] += CODE_QUARANTINE_S + 1
    desk.close(second)
    third = desk.open(turn_id="t3", call_id="c", tool="x", arguments={}, asker=ASKER, channel="slack:C1")
    assert third is not None and third.request.code == "1111"


async def test_a_full_desk_takes_no_more_requests() -> None:
    counter = iter(range(10_000, 10_000 + MAX_PENDING + 1))
    desk = ApprovalDesk(codes=lambda: str(next(counter)))
    for n in range(MAX_PENDING):
        assert desk.open(turn_id="t", call_id=str(n), tool="x", arguments={}, asker=ASKER, channel="slack:C1") is not None
    assert desk.open(turn_id="t", call_id="over", tool="x", arguments={}, asker=ASKER, channel="slack:C1") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approve 4821", ("4821", True)),
        ("Deny #4821.", ("4821", False)),
        ("批准 4821", ("4821", True)),
        ("拒绝4821", ("4821", False)),
        ("approve the restart of 4821 hosts", None),
        ("approve 48", None),
        ("should I approve 4821?", None),
    ],
)
def test_only_a_bare_decision_is_a_command(text: str, expected: tuple[str, bool] | None) -> None:
    command = parse_command(text)
    assert (None if command is None else (command.code, command.approved)) == expected


@pytest.mark.parametrize(
    ("voter", "four_eyes", "answer"),
    [
        (ADMIN, False, "decided"),
        (Principal.of("slack", "U1"), False, "not_approver"),  # the asker, an oncall member who is no approver
        (Principal.of("slack", "UADMIN", external=True, team="TOTHER"), False, "not_approver"),  # another org
        (Principal.of("slack", "U9", groups=frozenset()), False, "not_approver"),  # a viewer
        (ADMIN, True, "decided"),
    ],
)
async def test_only_an_approver_decides(voter: Principal, four_eyes: bool, answer: str) -> None:
    policy = POLICY.model_copy(update={"approvals": POLICY.approvals.model_copy(update={"four_eyes": four_eyes})})
    approvers = Approvers(_desk("4821"), policy, lambda: TOOLS)
    pending = approvers.desk.open(turn_id="t", call_id="c", tool="restart_server", arguments={}, asker=ASKER, channel="slack:C1")
    assert pending is not None
    result = approvers.vote("4821", voter, approved=True, locale="en")
    assert result.answer == answer
    assert pending.vote.done() == (answer == "decided")
    if answer == "not_approver":
        assert "Only an approver" in result.note


async def test_with_four_eyes_an_approver_may_not_approve_their_own_request() -> None:
    policy = POLICY.model_copy(update={"approvals": POLICY.approvals.model_copy(update={"four_eyes": True})})
    approvers = Approvers(_desk("4821"), policy, lambda: TOOLS)
    approvers.desk.open(turn_id="t", call_id="c", tool="restart_server", arguments={}, asker=ADMIN, channel="slack:C1")
    own = approvers.vote("4821", ADMIN, approved=True, locale="en")
    assert own.answer == "own_request" and "another approver" in own.note
    assert approvers.vote("4821", Principal.of("slack", "UNOBODY"), approved=True, locale="en").answer == "not_approver"
    assert approvers.vote("9999", ADMIN, approved=True, locale="en").answer == "unknown"


async def test_a_vote_counts_only_where_the_card_is_and_from_the_askers_platform() -> None:
    policy = POLICY.model_copy(update={"roles": {**POLICY.roles, "admin": POLICY.roles["admin"].model_copy(
        update={"members": ["slack:UADMIN", "dingtalk:boss01"]})}})
    approvers = Approvers(_desk("4821"), policy, lambda: TOOLS)
    pending = approvers.desk.open(turn_id="t", call_id="c", tool="restart_server", arguments={}, asker=ASKER,
                                  channel="slack:C1")
    assert pending is not None
    # an approver on DingTalk cannot decide a Slack channel's call by typing its code
    assert approvers.vote("4821", Principal.of("dingtalk", "boss01"), approved=True, locale="en").answer == "unknown"
    # nor can a Slack approver from another channel
    assert approvers.vote("4821", ADMIN, approved=True, locale="en", channel="slack:C2").answer == "unknown"
    assert not pending.vote.done()
    assert approvers.vote("4821", ADMIN, approved=True, locale="en", channel="slack:C1").answer == "decided"


# --- the loop waits -------------------------------------------------------------------------------


@tool
def find_server(query: str) -> str:
    """Find a server.

    Args:
        query: IP or name.
    """
    return f"web-1 matches {query}"


class Loop:
    """The scripted model, a registry with a restart tool, and a loop whose calls may wait on ``desk``."""

    def __init__(self, server: ScriptedLLMServer, llm: LLMClient, memory: Memory, desk: ApprovalDesk) -> None:
        self.server = server
        self.desk = desk
        self.restarts: list[str] = []
        self.registry = ToolRegistry([find_server, restart_tool(self.restarts)])
        self.llm = llm
        self.memory = memory

    def loop(self, *, turn_timeout_s: float | None = None, approval_timeout_s: float = 60) -> ToolLoop:
        return ToolLoop(self.llm, self.registry, self.memory, max_rounds=4, system_prompt="sys", approvals=self.desk,
                        turn_timeout_s=turn_timeout_s, approval_timeout_s=approval_timeout_s)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Loop]:
    store = SqliteStore(tmp_path / "history.db")
    await store.open()
    async with ScriptedLLMServer() as server:
        llm = LLMClient(llm_config(server.base_url), backoff_base_s=0.01)
        try:
            yield Loop(server, llm, Memory(store, max_history_tokens=4000, keep_recent_turns=2), ApprovalDesk())
        finally:
            await llm.aclose()
            await store.close()


CTX = ToolContext(
    user_id="U1", user_name="carol", platform="slack", conversation_id="conv", chat_id="C1", is_group=True, principal=ASKER,
    grant=Grant(roles=("oncall",), tools=frozenset({"find_server", "restart_server"}), approval=frozenset({"restart_server"})),
)


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> Script:
    return Script.tool_calls([(call_id, name, json.dumps(args)) for call_id, name, args in calls])


async def _decide_each(events: AsyncIterator[TurnEvent], desk: ApprovalDesk, verdicts: dict[str, bool],
                       *, before: asyncio.Event | None = None) -> list[TurnEvent]:
    """Consume the turn; each approval requested is decided by ``verdicts[call_id]`` (after ``before`` is set)."""
    seen: list[TurnEvent] = []
    async for event in events:
        seen.append(event)
        if isinstance(event, ApprovalRequested):
            if before is not None:
                await before.wait()
            assert desk.decide(event.code, ApprovalVote(approved=verdicts[event.call_id], by=ADMIN)) == "decided"
    return seen


async def test_parallel_calls_wait_each_for_its_own_decision_while_others_run(harness: Loop) -> None:
    harness.server.enqueue(
        _calls(("a", "restart_server", {"host": "web-1"}), ("b", "find_server", {"query": "web"}),
               ("c", "restart_server", {"host": "web-2"})),
        Script.text("Restarted web-1; web-2 was denied."),
    )
    events = await _decide_each(harness.loop().run_turn("conv", "restart web-1 and web-2", CTX), harness.desk,
                                {"a": True, "c": False})
    requested = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [(e.call_id, e.asker) for e in requested] == [("a", "@carol"), ("c", "@carol")]
    decided = {e.call_id: e for e in events if isinstance(e, ApprovalDecided)}
    assert decided["a"].verdict == "approved" and decided["a"].by == "@alice" and decided["c"].verdict == "denied"
    assert harness.restarts == ["web-1"]  # the denied call never ran
    finished = {e.call_id: e for e in events if isinstance(e, ToolCallFinished)}
    assert finished["a"].ok and finished["b"].ok and not finished["c"].ok
    # the model reads each outcome as the call's result, in call order
    results = [m["content"] for m in harness.server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "web-1 restarted" in results[0] and "web-1 matches web" in results[1]
    assert "@alice denied this call" in results[2]
    assert isinstance(events[-1], TurnDone) and len(harness.desk) == 0


async def test_the_wait_for_an_approval_does_not_count_against_the_turn_timeout(harness: Loop) -> None:
    harness.server.enqueue(_calls(("a", "restart_server", {"host": "web-1"})), Script.text("Restarted."))
    decide_now = asyncio.Event()
    # The approver takes well over the turn's whole budget; only the approval's own timeout bounds that.
    asyncio.get_running_loop().call_later(4, decide_now.set)
    loop = harness.loop(turn_timeout_s=1.5)
    events = await _decide_each(loop.run_turn("conv", "restart web-1", CTX), harness.desk, {"a": True}, before=decide_now)
    assert isinstance(events[-1], TurnDone) and harness.restarts == ["web-1"]


async def test_the_approvals_own_timeout_denies_the_call(harness: Loop) -> None:
    harness.server.enqueue(_calls(("a", "restart_server", {"host": "web-1"})), Script.text("Nobody approved."))
    events = [e async for e in harness.loop(approval_timeout_s=0.2).run_turn("conv", "restart web-1", CTX)]
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert decided.verdict == "timeout" and decided.by == "" and harness.restarts == []
    [result] = [m["content"] for m in harness.server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "no approver decided within 0.2 s" in result
    assert len(harness.desk) == 0


async def test_stopping_a_turn_while_it_waits_takes_its_request_off_the_desk(harness: Loop) -> None:
    harness.server.enqueue(_calls(("a", "restart_server", {"host": "web-1"})))
    requested = asyncio.Event()

    async def consume() -> None:
        async for event in harness.loop().run_turn("conv", "restart web-1", CTX):
            if isinstance(event, ApprovalRequested):
                requested.set()

    task = asyncio.create_task(consume())
    await requested.wait()
    assert len(harness.desk) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(harness.desk) == 0 and harness.restarts == []


async def test_without_a_desk_a_call_that_needs_an_approval_is_denied_at_once(harness: Loop) -> None:
    harness.server.enqueue(_calls(("a", "restart_server", {"host": "web-1"})), Script.text("It needs an approval."))
    events = [e async for e in harness.loop().run_turn("conv", "restart web-1", CTX, approvals=False)]
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert decided.verdict == "unavailable" and decided.by == "" and harness.restarts == []
    assert not [e for e in events if isinstance(e, ApprovalRequested)]
    [result] = [m["content"] for m in harness.server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "none can be given here" in result


async def test_a_call_whose_arguments_are_too_long_to_show_is_denied_without_asking(harness: Loop) -> None:
    host = "web-" + "x" * MAX_SHOWN_ARGUMENTS
    harness.server.enqueue(_calls(("a", "restart_server", {"host": host})), Script.text("Too long."))
    events = [e async for e in harness.loop().run_turn("conv", "restart it", CTX)]
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert decided.verdict == "too_long" and harness.restarts == [] and len(harness.desk) == 0
    [result] = [m["content"] for m in harness.server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "too long to show an approver" in result


def test_an_approver_sees_every_argument_of_the_call_and_nothing_can_break_out_of_it() -> None:
    state = CardState(locale="en")
    arguments = {"host": "web-1", "a": 1, "b": 2, "opts": {"all_hosts": True}, "note": "```\n<!channel> ![x](http://e/x)"}
    state.apply(ToolCallStarted(call_id="c1", name="restart_server", arguments=arguments))
    state.apply(ApprovalRequested(call_id="c1", name="restart_server", code="4821", token="tok", arguments=arguments,
                                  asker="@carol", timeout_s=300))
    [prompt] = state.snapshot().approvals
    assert '"all_hosts": true' in prompt.arguments and '"b": 2' in prompt.arguments  # nested and 4th+ arguments too
    body = render_markdown(state.snapshot())
    block = body.split("```\n", 1)[1].split("\n```", 1)[0]
    assert block == prompt.arguments and "`" not in block  # the fence cannot be closed from inside
    assert "reply approve 4821 or deny 4821" in body  # the tool line names the code too
