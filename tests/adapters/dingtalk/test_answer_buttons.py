"""A final answer's Refresh and 👍 / 👎 on the fake DingTalk: AI card buttons pressed through the Stream-mode card
callback, a 👎's reason replied as ``原因 …``, and ``刷新`` typed in the group.

The template's buttons send the param ``turn_id``, the variable the gateway sets
on a final answer's card to show them. A Refresh asks the question again as the
presser with caches bypassed (the tool sees ``ToolContext.fresh``); votes are
kept once per person and answer and listed by ``botgateway feedback``.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from botgateway.cli.feedback import run_feedback
from botgateway.config import MemoryConfig
from botgateway.tooling import ToolContext, tool
from tests.fakes.dingtalk import CARD_CALLBACK_TOPIC
from tests.fakes.dingtalk_env import Env
from tools.demo.script import Script

QUESTION = "10.0.1.5 是哪台机器？"


def respond(body: dict[str, Any]) -> Script:
    """Look the address up once per question (the history holds earlier questions' lookups), then answer."""
    messages = body["messages"]
    last_question = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    if not any(m.get("role") == "tool" for m in messages[last_question:]):
        return Script.tool_calls([("c1", "lookup", '{"ip": "10.0.1.5"}')])
    return Script.text("10.0.1.5 是 web-01。")


def lookup_tool(seen: list[tuple[str, bool]]) -> Any:
    @tool
    def lookup(ip: str, ctx: ToolContext) -> str:
        """Find a host by IP.

        Args:
            ip: The IP address.
        """
        seen.append((ctx.user_id, ctx.fresh))
        return f"1 host: web-01 {ip}"

    return lookup


async def _press(env: Env, out_track_id: str, user: str, action: str, turn_id: str) -> None:
    frame = await env.fake.push_card_action(out_track_id, user_id=user, action=action, params={"turn_id": turn_id})
    assert (await env.fake.wait_ack(frame))["code"] == 200
    await env.adapter.drain()


async def test_refresh_on_the_card_asks_again_as_the_presser_with_caches_bypassed(make_env) -> None:
    seen: list[tuple[str, bool]] = []
    env: Env = await make_env(answer_buttons=True, tools=[lookup_tool(seen)], responder=respond)
    assert CARD_CALLBACK_TOPIC in env.fake.subscriptions
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    first = await env.finished(question)
    [card] = env.cards()
    assert first.outcome == "done" and card.params.get("turn_id") == first.turn_id  # the buttons show

    await _press(env, card.out_track_id, "staff002", "refresh", first.turn_id)
    _, submission = env.adapter.submissions[-1]
    refreshed = await submission.done  # type: ignore[misc]
    assert refreshed.outcome == "done" and refreshed.turn_id != first.turn_id
    assert seen == [("staff001", False), ("staff002", True)]  # the tool was told to bypass its caches
    assert len(env.cards()) == 2 and "web-01" in env.cards()[1].content  # a new card in the same group
    [record] = [r for r in await env.store.audit_records() if r.turn_id == refreshed.turn_id]
    assert record.principal == "dingtalk:staff002" and record.question == QUESTION

    # typed in the group, 刷新 refreshes the newest answer too
    typed, _ = await env.ask("刷新", staff_id="staff001")
    again = await env.finished(typed)
    assert again.outcome == "done" and seen[-1] == ("staff001", True)


async def test_votes_are_kept_once_per_person_and_a_thumbs_down_reason_is_replied(make_env) -> None:
    env: Env = await make_env(answer_buttons=True, responder=respond, tools=[lookup_tool([])])
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    first = await env.finished(question)
    [card] = env.cards()

    await _press(env, card.out_track_id, "staff001", "feedback_up", first.turn_id)
    await _press(env, card.out_track_id, "staff002", "feedback_up", first.turn_id)
    assert [m for m in env.fake.messages if m.via == "oto"] == []  # a 👍 needs no answer
    await _press(env, card.out_track_id, "staff001", "feedback_down", first.turn_id)  # changes staff001's vote
    [prompt] = [m for m in env.fake.messages if m.via == "oto"]
    assert prompt.chat == "staff001" and "原因" in prompt.text

    reason, _ = await env.ask("原因 这台机器已经下线了", staff_id="staff001")
    assert (await env.finished(reason)).outcome == "feedback"
    assert len(env.cards()) == 1  # the reason is no question

    out = io.StringIO()
    config = env.config.model_copy(update={"memory": MemoryConfig(sqlite_path=str(env.store.path))})
    assert await run_feedback(config, since=None, vote="", fmt="csv", limit=100, out=out) == 0
    rows = {row["voter"]: row for row in csv.DictReader(io.StringIO(out.getvalue()))}
    assert set(rows) == {"dingtalk:staff001", "dingtalk:staff002"}
    assert (rows["dingtalk:staff001"]["vote"], rows["dingtalk:staff001"]["reason"]) == ("down", "这台机器已经下线了")
    assert (rows["dingtalk:staff002"]["vote"], rows["dingtalk:staff002"]["reason"]) == ("up", "")
    assert rows["dingtalk:staff001"]["tools"] == "lookup" and rows["dingtalk:staff001"]["question"] == QUESTION

    # without a 👎 waiting for one, "原因 …" is a question like any other
    other, _ = await env.ask("原因 是什么导致 web-01 负载高？", staff_id="staff002")
    assert (await env.finished(other)).outcome == "done"


async def test_without_buttons_in_the_template_the_card_gets_no_turn_id_and_refresh_is_typed(make_env) -> None:
    seen: list[tuple[str, bool]] = []
    env: Env = await make_env(tools=[lookup_tool(seen)], responder=respond)
    assert CARD_CALLBACK_TOPIC not in env.fake.subscriptions
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    await env.finished(question)
    [card] = env.cards()
    assert "turn_id" not in card.params
    assert not [c for c in env.fake.calls if c.path == "/v1.0/card/instances" and c.method == "PUT"]

    nothing, _ = await env.ask("刷新", staff_id="staff001", conversation_id="cidOtherGroup==")
    assert (await env.finished(nothing)).outcome == "refused"
    typed, _ = await env.ask("刷新", staff_id="staff002")
    assert (await env.finished(typed)).outcome == "done" and seen[-1] == ("staff002", True)
