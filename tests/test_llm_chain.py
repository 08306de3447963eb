"""Model fallback and routing end to end: the tool loop over a :class:`ModelChain` of two real scripted servers.

The primary answers 503, 429, hangs or breaks before its first token (the
fallback answers, and says it stands in), or breaks mid-answer (nobody else is
asked). The breaker skips a dead primary on the next turn and tries it again
after the cool-down, on a clock the test moves. Routes choose by channel and by
role, for rounds and for the memory's summary alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from botgateway.cards.render import render_plain
from botgateway.cards.state import CardState
from botgateway.events import AnswerDelta, ModelAnswering, RoundStarted, TurnDone, TurnFailed
from botgateway.grant import Grant
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import ModelChain, asking, build_chain
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.llm import TEST_API_KEY, llm_config
from tools.demo.script import Pause, Script
from tools.demo.server import ScriptedLLMServer

ASKER = ToolContext(user_id="U1", platform="slack", chat_id="C0OPS", conversation_id="conv", is_group=True)


class Clock:
    """Monotonic seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """Two scripted servers, the chain over them, and the loop."""

    primary: ScriptedLLMServer
    backup: ScriptedLLMServer
    chain: ModelChain
    loop: ToolLoop
    memory: Memory
    clock: Clock

    async def turn(self, text: str = "which host is 10.0.0.1?", ctx: ToolContext = ASKER) -> list[Any]:
        return [event async for event in self.loop.run_turn(ctx.conversation_id, text, ctx)]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedLLMServer, ScriptedLLMServer]]:
    async with ScriptedLLMServer(model="primary-model") as primary, ScriptedLLMServer(model="backup-model") as backup:
        yield primary, backup


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "history.db")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def make_rig(
    servers: tuple[ScriptedLLMServer, ScriptedLLMServer], store: SqliteStore
) -> AsyncIterator[Any]:
    """``make_rig(**llm_section)``: the rig with the primary's and the backup's endpoints and that section."""
    primary, backup = servers
    made: list[Rig] = []

    def make(max_history_tokens: int = 100_000, **section: Any) -> Rig:
        values: dict[str, Any] = {
            "model": "primary-model",
            "max_retries": 0,
            "first_token_timeout_s": 1,
            "fallbacks": [{"name": "backup", "provider": "custom", "base_url": backup.base_url, "api_key": TEST_API_KEY,
                           "model": "backup-model"}],
            "breaker": {"failures": 1, "cooldown_s": 60},
        }
        values.update(section)
        clock = Clock()
        chain = build_chain(llm_config(primary.base_url, **values), clock=clock, backoff_base_s=0.01)
        memory = Memory(store, max_history_tokens=max_history_tokens, keep_recent_turns=1, summarizer=chain.complete)
        loop = ToolLoop(chain, ToolRegistry(default_timeout_s=5), memory, max_rounds=2, system_prompt="sys")
        made.append(Rig(primary, backup, chain, loop, memory, clock))
        return made[-1]

    yield make
    for rig in made:
        await rig.memory.aclose()
        await rig.chain.aclose()


def answering(events: list[Any]) -> list[ModelAnswering]:
    return [e for e in events if isinstance(e, ModelAnswering)]


def answer(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, AnswerDelta))


def footer(events: list[Any], locale: str = "en") -> str:
    """The footer of the final card, as the gateway's card state draws it (the configured model named until then)."""
    state = CardState(locale=locale, model_label="primary-model")
    for event in events:
        state.apply(event)
    return render_plain(state.snapshot()).rpartition("— ")[2]


# --- before the first token: the fallback answers ------------------------------------------


PRE_FIRST_TOKEN_FAILURES = {
    "503": Script.error(503, "overloaded"),
    "429": Script.error(429, "rate limited", retry_after=30),
    "hang": Script(chunks=[Pause(30)], done=False),
    "drop": Script.text("never shown").with_options(disconnect_after=1),
}


@pytest.mark.parametrize("failure", sorted(PRE_FIRST_TOKEN_FAILURES))
async def test_a_primary_failing_before_its_first_token_hands_the_round_to_the_fallback(make_rig: Any, failure: str) -> None:
    rig = make_rig()
    rig.primary.enqueue(PRE_FIRST_TOKEN_FAILURES[failure])
    rig.backup.enqueue(Script.text("10.0.0.1 is web-1."))
    events = await rig.turn()

    assert isinstance(events[-1], TurnDone) and events[-1].result.answer == "10.0.0.1 is web-1."
    assert answering(events) == [ModelAnswering(model="backup-model", endpoint="backup", fallback_from="primary")]
    # It is said before the round's first text, right after the round starts.
    assert isinstance(events[0], RoundStarted) and isinstance(events[1], ModelAnswering)
    assert rig.primary.request_count == 1 and rig.backup.request_count == 1
    assert rig.backup.requests[0]["model"] == "backup-model"
    assert rig.backup.request_headers[0]["Authorization"] == f"Bearer {TEST_API_KEY}"
    # The fallback sees exactly the request the primary saw, but for the model's name.
    assert {**rig.primary.requests[0], "model": "x"} == {**rig.backup.requests[0], "model": "x"}
    # The card's footer names the model that answered, and that it stood in.
    assert "answered by backup-model (fallback)" in footer(events)
    assert "primary-model" not in footer(events)
    assert "由 backup-model 回答（备用模型）" in footer(events, "zh-CN")


async def test_a_healthy_primary_answers_and_says_so(make_rig: Any) -> None:
    rig = make_rig()
    rig.primary.enqueue(Script.text("web-1."))
    events = await rig.turn()
    assert answering(events) == [ModelAnswering(model="primary-model", endpoint="primary", fallback_from="")]
    assert rig.backup.request_count == 0
    assert "primary-model" in footer(events) and "fallback" not in footer(events)


async def test_every_round_says_which_model_answered_it(make_rig: Any) -> None:
    rig = make_rig(max_rounds=2)
    rig.primary.enqueue(Script.error(503, "overloaded"))
    rig.backup.enqueue(Script.tool_calls([("call_1", "missing_tool", {})]), Script.text("No such tool."))
    events = await rig.turn()
    assert isinstance(events[-1], TurnDone)
    # The breaker opened on the first round's 503: the second round goes straight to the backup.
    assert [(e.endpoint, e.fallback_from) for e in answering(events)] == [("backup", "primary"), ("backup", "primary")]
    assert rig.primary.request_count == 1


async def test_the_retries_of_an_endpoint_come_before_its_fallback(make_rig: Any) -> None:
    rig = make_rig(max_retries=1, breaker={"failures": 2, "cooldown_s": 60})
    rig.primary.enqueue(Script.error(503, "overloaded"), Script.text("second try"))
    events = await rig.turn()
    assert events[-1].result.answer == "second try"
    assert answering(events)[0].endpoint == "primary"
    assert rig.primary.request_count == 2 and rig.backup.request_count == 0


async def test_when_every_endpoint_fails_the_card_names_them_all(make_rig: Any) -> None:
    rig = make_rig()
    rig.primary.enqueue(Script.error(503, "overloaded"))
    rig.backup.enqueue(Script.error(502, "bad gateway"))
    events = await rig.turn()
    [failed] = events[1:]
    assert isinstance(failed, TurnFailed) and failed.reason == "llm_unavailable"
    assert failed.message.startswith("No model endpoint could answer (primary: HTTP 503, backup: HTTP 502).")
    assert TEST_API_KEY not in failed.message


async def test_a_refused_request_is_not_sent_to_another_model(make_rig: Any) -> None:
    rig = make_rig()
    rig.primary.enqueue(Script.error(401, f"Incorrect API key provided: {TEST_API_KEY}", code="invalid_api_key"))
    events = await rig.turn()
    assert isinstance(events[-1], TurnFailed) and "llm.api_key" in events[-1].message
    assert rig.backup.request_count == 0
    # Nor does it count against the primary's health: the next turn asks it again.
    rig.primary.enqueue(Script.text("web-1."))
    events = await rig.turn()
    assert answering(events)[0].endpoint == "primary"


# --- after the first token: never another model --------------------------------------------


async def test_a_primary_dying_mid_answer_is_not_retried_on_another_model(make_rig: Any) -> None:
    rig = make_rig()
    rig.primary.enqueue(Script.text("10.0.0.1 is web-1 in rack 4.", chunk_size=4).with_options(disconnect_after=4))
    rig.backup.enqueue(Script.text("a fallback would repeat the text"))
    events = await rig.turn()

    failed = events[-1]
    assert isinstance(failed, TurnFailed) and failed.reason == "interrupted"
    assert "broke mid-answer" in failed.message
    assert failed.partial_answer and "10.0.0.1 is web-1 in rack 4.".startswith(failed.partial_answer)
    assert answering(events) == [ModelAnswering(model="primary-model", endpoint="primary", fallback_from="")]
    assert rig.backup.request_count == 0
    # It did answer: its breaker stays closed, and the next turn asks it first.
    rig.primary.enqueue(Script.text("web-1."))
    assert answering(await rig.turn())[0].endpoint == "primary"


# --- the breaker -------------------------------------------------------------------------------


async def test_the_breaker_skips_a_dead_primary_on_the_next_turn_and_retries_it_after_the_cooldown(make_rig: Any) -> None:
    rig = make_rig(breaker={"failures": 1, "cooldown_s": 60})
    rig.primary.enqueue(Script.error(503, "overloaded"))
    rig.backup.enqueue(Script.text("one"), Script.text("two"))
    await rig.turn()
    assert rig.primary.request_count == 1

    events = await rig.turn()
    assert events[-1].result.answer == "two"
    assert rig.primary.request_count == 1  # skipped: not even asked
    assert answering(events) == [ModelAnswering(model="backup-model", endpoint="backup", fallback_from="primary")]

    rig.clock.now += 60
    rig.primary.enqueue(Script.text("back again"))
    events = await rig.turn()
    assert events[-1].result.answer == "back again"
    assert rig.primary.request_count == 2 and rig.backup.request_count == 2
    assert answering(events) == [ModelAnswering(model="primary-model", endpoint="primary", fallback_from="")]


async def test_a_failed_trial_skips_the_primary_for_another_cooldown(make_rig: Any) -> None:
    rig = make_rig(breaker={"failures": 1, "cooldown_s": 60})
    rig.primary.enqueue(Script.error(503, "overloaded"), Script.error(500, "still broken"))
    rig.backup.enqueue(*(Script.text(f"answer {n}") for n in range(3)))
    await rig.turn()
    rig.clock.now += 60
    await rig.turn()  # the trial fails, the backup answers
    assert rig.primary.request_count == 2
    rig.clock.now += 59
    await rig.turn()
    assert rig.primary.request_count == 2 and rig.backup.request_count == 3


async def test_with_every_breaker_open_the_endpoints_are_asked_anyway(make_rig: Any) -> None:
    rig = make_rig(fallbacks=[])
    rig.primary.enqueue(Script.error(503, "overloaded"), Script.text("web-1."))
    await rig.turn()
    events = await rig.turn()  # the only endpoint is cooling down: a doubtful answer beats none
    assert events[-1].result.answer == "web-1." and rig.primary.request_count == 2


async def test_a_turn_asking_a_cooling_endpoint_anyway_leaves_another_turns_trial_alone(make_rig: Any) -> None:
    rig = make_rig(fallbacks=[], first_token_timeout_s=30)
    rig.primary.enqueue(Script.error(503, "overloaded"))
    await rig.turn()  # the breaker opens
    rig.clock.now += 60
    rig.primary.enqueue(Script(chunks=[Pause(30)], done=False), Script.error(400, "bad request"))
    trial = asyncio.create_task(rig.turn())  # the half-open trial: the primary has not answered yet
    await rig.primary.wait_for_requests(2)
    # Another turn finds every endpoint cooling down, asks anyway, and is refused: it never held the trial.
    events = await rig.turn()
    assert isinstance(events[-1], TurnFailed) and events[-1].reason == "llm_refused"
    [link] = rig.chain.chain_for_asker()
    assert link.breaker.try_acquire() is None  # the first turn's trial still runs: no second one starts
    trial.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await trial
    assert link.breaker.try_acquire() is not None  # the trial, ended by its own turn, frees the endpoint


# --- routes --------------------------------------------------------------------------------------


async def test_a_route_by_channel_keeps_its_questions_on_its_endpoint(make_rig: Any) -> None:
    rig = make_rig(routes=[{"channels": ["slack:C0SECRET*"], "endpoint": "backup", "fallbacks": []}])
    secret = ToolContext(user_id="U1", platform="slack", chat_id="C0SECRET7", conversation_id="secret", is_group=True)
    rig.backup.enqueue(Script.text("from the local model"))
    events = await rig.turn(ctx=secret)
    assert answering(events) == [ModelAnswering(model="backup-model", endpoint="backup", fallback_from="")]
    assert rig.primary.request_count == 0

    # With no fallbacks named, its endpoint failing ends the turn: nothing leaves for the primary.
    rig.backup.enqueue(Script.error(503, "overloaded"))
    events = await rig.turn(ctx=secret)
    assert isinstance(events[-1], TurnFailed) and rig.primary.request_count == 0

    # Elsewhere, the primary answers as usual.
    rig.primary.enqueue(Script.text("from the primary"))
    events = await rig.turn()
    assert answering(events)[0].endpoint == "primary"


@pytest.mark.parametrize("endpoint", ["named", "own"])
async def test_a_route_to_another_endpoint_falls_back_nowhere_unless_it_names_fallbacks(
    make_rig: Any, servers: tuple[ScriptedLLMServer, ScriptedLLMServer], endpoint: str
) -> None:
    _, backup = servers
    own = {"name": "local", "provider": "custom", "base_url": backup.base_url, "model": "local-model"}
    rig = make_rig(routes=[{"channels": ["slack:C0SECRET*"], "endpoint": "backup" if endpoint == "named" else own}])
    secret = ToolContext(user_id="U1", platform="slack", chat_id="C0SECRET7", conversation_id="secret", is_group=True)
    backup.enqueue(Script.error(503, "overloaded"))
    events = await rig.turn(ctx=secret)
    # A sensitive channel routed to its own model: its endpoint failing ends the turn, the primary never sees it.
    assert isinstance(events[-1], TurnFailed) and events[-1].reason == "llm_unavailable"
    assert rig.primary.request_count == 0 and backup.request_count == 1


async def test_a_route_by_role_chooses_another_model_and_keeps_the_usual_fallbacks(make_rig: Any) -> None:
    rig = make_rig(routes=[{"roles": ["viewer"], "model": "cheap-model"}])
    grant = Grant(tools=frozenset(), roles=("viewer",))
    viewer = ToolContext(user_id="U2", platform="slack", chat_id="C0OPS", conversation_id="v", is_group=True, grant=grant)
    rig.primary.enqueue(Script.text("cheap answer"), Script.text("full answer"))
    events = await rig.turn(ctx=viewer)
    assert answering(events) == [ModelAnswering(model="cheap-model", endpoint="primary", fallback_from="")]
    assert rig.primary.requests[-1]["model"] == "cheap-model"
    events = await rig.turn()  # an asker without the role
    assert rig.primary.requests[-1]["model"] == "primary-model"

    # The cheap model failing hands the round to the other endpoints, as for everyone.
    rig.primary.enqueue(Script.error(429, "rate limited"))
    rig.backup.enqueue(Script.text("backup answer"))
    events = await rig.turn(ctx=viewer)
    assert answering(events) == [ModelAnswering(model="backup-model", endpoint="backup", fallback_from="primary")]


async def test_roles_the_context_carries_match_too_and_the_first_matching_route_wins(make_rig: Any) -> None:
    rig = make_rig(routes=[
        {"name": "ops-room", "channels": ["slack:C0OPS"], "roles": ["oncall"], "model": "ops-model"},
        {"name": "viewers", "roles": ["viewer", "oncall"], "model": "cheap-model"},
    ])
    oncall = ToolContext(user_id="U3", platform="slack", chat_id="C0OPS", conversation_id="o", is_group=True,
                         roles=frozenset({"oncall"}))
    elsewhere = ToolContext(user_id="U3", platform="slack", chat_id="C0DEV", conversation_id="d", is_group=True,
                            roles=frozenset({"oncall"}))
    rig.primary.enqueue(Script.text("a"), Script.text("b"))
    await rig.turn(ctx=oncall)
    await rig.turn(ctx=elsewhere)
    assert [r["model"] for r in rig.primary.requests] == ["ops-model", "cheap-model"]


async def test_a_route_of_its_own_endpoint(make_rig: Any, servers: tuple[ScriptedLLMServer, ScriptedLLMServer]) -> None:
    _, backup = servers
    own = {"name": "local", "provider": "custom", "base_url": backup.base_url, "model": "local-model"}
    rig = make_rig(routes=[{"channels": ["slack:*"], "endpoint": own, "fallbacks": ["primary"]}])
    backup.enqueue(Script.error(503, "overloaded"))
    rig.primary.enqueue(Script.text("from the primary"))
    events = await rig.turn()
    assert backup.requests[0]["model"] == "local-model"
    assert answering(events) == [ModelAnswering(model="primary-model", endpoint="primary", fallback_from="local")]


# --- the memory's summary --------------------------------------------------------------------------


async def seed_history(memory: Memory, conversation: str) -> None:
    for n in range(4):
        await memory.commit(conversation, f"t{n}", [
            {"role": "user", "content": f"question {n} " + "about the fleet " * 30},
            {"role": "assistant", "content": f"answer {n} " + "web-1 is fine " * 30},
        ])


def summary_requests(server: ScriptedLLMServer) -> list[dict[str, Any]]:
    return [body for body in server.requests if "tools" not in body and "question 0" in str(body["messages"])]


async def test_the_summary_of_a_long_history_falls_back_like_a_round(make_rig: Any) -> None:
    rig = make_rig(max_history_tokens=300)
    await seed_history(rig.memory, "conv")
    rig.primary.enqueue(Script.error(503, "overloaded"))
    rig.backup.enqueue(Script.text("Earlier: questions about the fleet; web-1 was fine."), Script.text("web-1."))
    events = await rig.turn()
    assert isinstance(events[-1], TurnDone)
    assert len(summary_requests(rig.backup)) == 1 and rig.primary.request_count == 1
    assert "Earlier: questions about the fleet" in str(rig.backup.requests[-1]["messages"])


async def test_the_summary_of_a_routed_channel_stays_on_its_endpoint(make_rig: Any) -> None:
    rig = make_rig(max_history_tokens=300,
                   routes=[{"channels": ["slack:C0SECRET*"], "endpoint": "backup", "fallbacks": []}])
    secret = ToolContext(user_id="U1", platform="slack", chat_id="C0SECRET7", conversation_id="secret", is_group=True)
    await seed_history(rig.memory, "secret")
    rig.backup.enqueue(Script.text("Earlier: the fleet was fine."), Script.text("web-1."))
    events = await rig.turn(ctx=secret)
    assert isinstance(events[-1], TurnDone)
    assert len(summary_requests(rig.backup)) == 1
    assert rig.primary.request_count == 0


async def test_outside_a_turn_the_default_chain_answers(make_rig: Any) -> None:
    rig = make_rig(routes=[{"channels": ["slack:*"], "endpoint": "backup"}])
    rig.primary.enqueue(Script.text("default"))
    assert await rig.chain.complete([{"role": "user", "content": "hi"}]) == "default"
    rig.backup.enqueue(Script.text("routed"))
    with asking(ASKER):
        assert await rig.chain.complete([{"role": "user", "content": "hi"}]) == "routed"
