"""A final answer's Refresh and 👍 / 👎 on the fake DingTalk: AI card buttons pressed through the Stream-mode card
callback, a 👎's reason replied as ``原因 …`` in the 1:1 chat, and ``刷新`` typed in the group.

The template's buttons send the param ``turn_id``, the variable a typed question's card is created with (the
template shows them once the card is finished: no call of their own). A Refresh asks the question again as the
presser with caches bypassed (the tool sees ``ToolContext.fresh``), and a presser of another organisation is
refused like any outsider; votes are kept once per person and answer and listed by ``botgateway feedback``.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from botgateway.cli.feedback import run_feedback
from botgateway.config import MemoryConfig
from botgateway.tooling import ToolContext, tool
from botgateway.unprompted import Channels, UnpromptedTurn, gateway_principal
from tests.fakes.dingtalk import CARD_CALLBACK_TOPIC
from tests.fakes.dingtalk_env import GROUP, Env
from tools.demo.script import Script

QUESTION = "10.0.1.5 是哪台机器？"
DM = "cidDirectStaff001=="
"""staff001's 1:1 chat with the robot."""


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


async def _press(env: Env, out_track_id: str, user: str, action: str, turn_id: str, corp_id: str = "dingcorp") -> None:
    frame = await env.fake.push_card_action(out_track_id, user_id=user, action=action, params={"turn_id": turn_id},
                                            corp_id=corp_id)
    assert (await env.fake.wait_ack(frame))["code"] == 200
    await env.adapter.drain()


def _card_updates(env: Env) -> list[Any]:
    """``PUT /v1.0/card/instances`` calls: a card's variables changed after its stream."""
    return [c for c in env.fake.calls if c.path == "/v1.0/card/instances" and c.method == "PUT"]


async def test_refresh_on_the_card_asks_again_as_the_presser_with_caches_bypassed(make_env) -> None:
    seen: list[tuple[str, bool]] = []
    env: Env = await make_env(answer_buttons=True, tools=[lookup_tool(seen)], responder=respond)
    assert CARD_CALLBACK_TOPIC in env.fake.subscriptions
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    first = await env.finished(question)
    [card] = env.cards()
    assert first.outcome == "done" and card.params.get("turn_id") == first.turn_id  # the buttons show
    # ... sent with the card's createAndDeliver, the template showing them once the card is finished: no extra call
    assert card.create_body["cardData"]["cardParamMap"]["turn_id"] == first.turn_id and card.finalized
    assert _card_updates(env) == []

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

    # While the 👎 waits: a question about a cause is a question, and so is a reason given in the group
    asking, _ = await env.ask("原因是什么？", staff_id="staff001", group=False, conversation_id=DM)
    assert (await env.finished(asking)).outcome == "done"
    in_group, _ = await env.ask("原因 这台机器已经下线了", staff_id="staff001")
    assert (await env.finished(in_group)).outcome == "done" and len(env.cards()) == 2
    # the reason, replied in the 1:1 chat where the robot asked for it
    reason, _ = await env.ask("原因 这台机器已经下线了", staff_id="staff001", group=False, conversation_id=DM)
    assert (await env.finished(reason)).outcome == "feedback"
    # once recorded, the 👎 waits no more: the same words again are a question
    again, _ = await env.ask("原因 还有别的机器吗", staff_id="staff001", group=False, conversation_id=DM)
    assert (await env.finished(again)).outcome == "done"

    out = io.StringIO()
    config = env.config.model_copy(update={"memory": MemoryConfig(sqlite_path=str(env.store.path))})
    assert await run_feedback(config, since=None, vote="", fmt="csv", limit=100, out=out) == 0
    rows = {row["voter"]: row for row in csv.DictReader(io.StringIO(out.getvalue()))}
    assert set(rows) == {"dingtalk:staff001", "dingtalk:staff002"}
    assert (rows["dingtalk:staff001"]["vote"], rows["dingtalk:staff001"]["reason"]) == ("down", "这台机器已经下线了")
    assert (rows["dingtalk:staff002"]["vote"], rows["dingtalk:staff002"]["reason"]) == ("up", "")
    assert rows["dingtalk:staff001"]["tools"] == "lookup" and rows["dingtalk:staff001"]["question"] == QUESTION

    # without a 👎 waiting for one, "原因 …" is a question like any other
    other, _ = await env.ask("原因 是什么导致 web-01 负载高？", staff_id="staff002", group=False,
                             conversation_id="cidDirectStaff002==")
    assert (await env.finished(other)).outcome == "done"


async def test_a_reason_replied_while_the_gateway_closes_is_refused_like_any_message(make_env) -> None:
    env: Env = await make_env(answer_buttons=True, responder=respond, tools=[lookup_tool([])])
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    first = await env.finished(question)
    [card] = env.cards()
    await _press(env, card.out_track_id, "staff001", "feedback_down", first.turn_id)
    assert await env.gateway.drain(5.0)  # nothing runs; from now on every question is refused

    reason, _ = await env.ask("原因 数据过时", staff_id="staff001", group=False, conversation_id=DM)
    assert (await env.finished(reason)).outcome == "refused"
    vote = await env.store.feedback_vote(first.turn_id, "dingtalk:staff001")
    assert vote is not None and vote.vote == "down" and vote.reason == ""


async def test_a_refresh_pressed_from_another_organisation_is_refused_even_after_a_restart(make_env) -> None:
    env: Env = await make_env(answer_buttons=True, responder=respond, tools=[lookup_tool([])])
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    first = await env.finished(question)
    [card] = env.cards()
    requests = len(env.llm_server.requests)

    async def refresh(on: Env, user: str, corp_id: str) -> str:
        """The status of the Refresh ``user`` of ``corp_id`` pressed on the card (an answer started is waited for)."""
        await _press(on, card.out_track_id, user, "refresh", first.turn_id, corp_id=corp_id)
        _, submission = on.adapter.submissions[-1]
        if submission.status == "started":
            assert submission.done is not None and (await submission.done).outcome == "done"
        return submission.status

    assert await refresh(env, "guest001", "othercorp") == "refused"
    assert await refresh(env, "guest002", "") == "refused"  # a press that does not say its organisation
    # A new process has learned nothing from a message yet: the organisation kept with the answer's card decides.
    restarted: Env = await make_env(answer_buttons=True, responder=respond, tools=[lookup_tool([])],
                                    fake=await make_env.fake())
    assert restarted.adapter.corp_id == ""
    assert await refresh(restarted, "guest001", "othercorp") == "refused"
    assert len(env.llm_server.requests) == requests and not restarted.llm_server.requests  # nobody was answered
    assert await refresh(restarted, "staff002", "dingcorp") == "started"  # a colleague's press is theirs to run


async def test_a_report_card_gets_no_turn_id_so_no_buttons(make_env) -> None:
    env: Env = await make_env(answer_buttons=True, responder=respond, tools=[lookup_tool([])])
    channels = Channels(env.gateway, {"dingtalk": env.adapter}, {"dingtalk": env.adapter.sink}, {})
    report = UnpromptedTurn(principal=gateway_principal("schedule", "daily"), role="viewer", question=QUESTION,
                            conversation_id="schedule:daily:1",
                            target=channels.target("dingtalk", GROUP, locale="zh-CN"))
    submission = await channels.ask(report)
    assert submission.status == "started" and submission.done is not None
    assert (await submission.done).outcome == "done"
    [card] = env.cards()
    assert card.finalized and "web-01" in card.content
    assert "turn_id" not in card.params and _card_updates(env) == []


async def test_without_buttons_in_the_template_the_card_gets_no_turn_id_and_refresh_is_typed(make_env) -> None:
    seen: list[tuple[str, bool]] = []
    env: Env = await make_env(tools=[lookup_tool(seen)], responder=respond)
    assert CARD_CALLBACK_TOPIC not in env.fake.subscriptions
    question, _ = await env.ask(QUESTION, staff_id="staff001")
    await env.finished(question)
    [card] = env.cards()
    assert "turn_id" not in card.params and _card_updates(env) == []

    nothing, _ = await env.ask("刷新", staff_id="staff001", conversation_id="cidOtherGroup==")
    assert (await env.finished(nothing)).outcome == "refused"
    typed, _ = await env.ask("刷新", staff_id="staff002")
    assert (await env.finished(typed)).outcome == "done" and seen[-1] == ("staff002", True)
