"""DingTalk end to end: the real dingtalk-stream client, gateway, tool loop and card streamer against fakes.

The fake DingTalk (gateway websocket, OAuth, card and robot APIs) and the
scripted OpenAI-compatible model run on loopback; the store is real SQLite.
Every assertion is about what the fake platform saw.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from adapters.dingtalk import DingTalkAdapter, sign
from adapters.dingtalk.message import MEDIA_HINT
from botgateway.budget import RateBudget
from tests.fakes.dingtalk import FakeCard, bot_message
from tests.fakes.dingtalk_env import GROUP
from tests.ports import free_port
from tools.demo.script import Pause, Script, role_chunk, text_chunks

ANSWER = (
    "10.0.1.100 是 web-01，位于杭州可用区 H，状态运行中。它在 prod 账号下，规格 ecs.g7.large，"
    "最近一次重启是 3 天前。如需登录，请通过堡垒机并使用运维账号。"
)


def answer_updates(card: FakeCard) -> list[dict[str, Any]]:
    return [u for u in card.updates if not u["isFinalize"]]


def typed_chars(content: str) -> int:
    """How much of ANSWER a live update shows (followed by the cursor)."""
    return max((n for n in range(1, len(ANSWER) + 1) if ANSWER[:n] + "▌" in content), default=0)


# --- the main path ----------------------------------------------------------------------


async def test_group_mention_streams_a_card_with_the_exact_final_answer(make_env):
    env = await make_env()
    env.llm_server.enqueue(
        Script.tool_calls([("c1", "find_host", {"ip": "10.0.1.100"})]),
        Script.text(ANSWER, chunk_size=3, delay_s=0.03),
    )
    msg_id, _ = await env.ask("10.0.1.100 是哪台机器？", nick="张三", staff_id="staff001")
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done"

    [card] = env.cards()
    create = card.create_body
    assert create["cardTemplateId"] == "botgateway-ai-card.schema"
    assert create["imGroupOpenDeliverModel"]["robotCode"] == env.fake.client_id
    assert "**@张三**" in create["cardData"]["cardParamMap"]["content"]

    typed = [typed_chars(u["content"]) for u in answer_updates(card)]
    typed = [n for n in typed if n > 0]
    assert len(typed) >= 2, f"several streaming updates while the answer is typed, got {typed}"
    # The last live update may already hold the whole answer (a busy machine finalizes a moment after it).
    assert typed == sorted(typed) and typed[0] < typed[-1] <= len(ANSWER), f"the answer grows: {typed}"

    final = card.updates[-1]
    assert final["isFinalize"] and not final["isError"] and final["isFull"]
    assert ANSWER in final["content"] and "▌" not in final["content"]
    assert "find_host" in final["content"] and "**@张三**" in final["content"]
    assert card.finalized and await env.store.open_cards() == []
    assert env.fake.messages == [], "a card turn sends no extra message"


async def test_an_undeliverable_card_still_gets_the_answer_out_as_one_markdown_reply(make_env):
    env = await make_env()
    env.fake.undeliverable_spaces.add(f"dtv1.card//IM_GROUP.{GROUP}")
    env.llm_server.enqueue(Script.text(ANSWER, chunk_size=6, delay_s=0.005))
    msg_id, _ = await env.ask("10.0.1.100 是哪台机器？", staff_id="staff001")
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done"
    [card] = env.cards()
    assert not card.delivered and card.updates == [], "nothing is streamed into a card nobody sees"
    [reply] = env.fake.messages
    assert ANSWER in reply.text


async def test_direct_chat_gets_a_card_in_the_robot_space(make_env):
    env = await make_env()
    env.llm_server.enqueue(Script.text("你好，我是运维助手。"))
    msg_id, _ = await env.ask("你好", group=False, conversation_id="cidDirect01==", staff_id="staff009", nick="王五")
    await env.finished(msg_id)
    [card] = env.fake.cards_in("dtv1.card//IM_ROBOT.staff009")
    assert card.create_body["imRobotOpenDeliverModel"]["spaceType"] == "IM_ROBOT"
    assert card.finalized and "你好，我是运维助手。" in card.content
    assert "@王五" not in card.content


async def test_direct_chat_without_a_staff_id_gets_one_markdown_reply_instead_of_a_card(make_env):
    """External users (and some org setups) send no senderStaffId: IM_ROBOT.{staffId} cannot address them."""
    env = await make_env()
    env.llm_server.enqueue(
        Script.tool_calls([("c1", "find_host", {"ip": "10.0.1.100"})]),
        Script.text(ANSWER, chunk_size=6, delay_s=0.005),
    )
    msg_id, _ = await env.ask("10.0.1.100 是哪台机器？", group=False, conversation_id="cidExternal01==",
                              staff_id=None, nick="外部用户")
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done"
    assert env.fake.card_calls() == [] and env.fake.cards == {}, "no card call at all"
    [reply] = env.fake.messages
    assert reply.via == "webhook" and reply.chat == "cidExternal01==" and reply.msg_key == "markdown"
    assert ANSWER in reply.text and "find_host" in reply.text
    assert "at" not in reply.body, "a 1:1 reply mentions nobody"
    assert await env.store.open_cards() == []

    # the same chat with a staff id still gets its card: the choice is per turn
    env.llm_server.enqueue(Script.text("好的。"))
    msg_id, _ = await env.ask("谢谢", group=False, conversation_id="cidExternal01==", staff_id="staff010")
    await env.finished(msg_id)
    [card] = env.fake.cards_in("dtv1.card//IM_ROBOT.staff010")
    assert card.finalized and "好的。" in card.content
    assert len(env.fake.messages) == 1


async def test_a_redelivered_message_is_answered_once(make_env):
    env = await make_env()
    env.llm_server.enqueue(Script.text("只回答一次。", delay_s=0.02))
    data = bot_message("重复投递", msg_id="msgRedelivered", webhook=env.fake.session_webhook(GROUP), conversation_id=GROUP)
    first = await env.fake.push_bot_message(data)
    second = await env.fake.push_bot_message(data)
    assert (await env.fake.wait_ack(first))["code"] == 200
    assert (await env.fake.wait_ack(second))["code"] == 200, "the redelivery is acked too"
    await env.finished("msgRedelivered")
    statuses = [s.status for m, s in env.adapter.submissions if m == "msgRedelivered"]
    assert sorted(statuses) == ["duplicate", "started"]
    assert len(env.cards()) == 1 and len(env.llm_server.requests) == 1


async def test_stop_from_the_asker_cancels_the_running_turn(make_env):
    env = await make_env()
    slow = Script(chunks=[role_chunk(), *text_chunks("正在查询第一批主机……"), Pause(30)])
    env.llm_server.enqueue(slow)
    msg_id, _ = await env.ask("列出所有主机", staff_id="staff001")
    await env.fake.wait_for(lambda: any("第一批" in u["content"] for c in env.cards() for u in c.updates))
    stop_id, _ = await env.ask("停止", staff_id="staff001")
    outcome = await env.finished(msg_id, timeout=10)
    assert outcome.outcome == "stopped"
    [card] = env.cards()
    final = card.updates[-1]
    assert final["isFinalize"] and not final["isError"]
    assert "已停止" in final["content"] and "第一批" in final["content"]
    assert env.adapter.submission(stop_id).status == "stopped"


async def test_a_dropped_socket_does_not_cancel_the_turn(make_env):
    env = await make_env()
    env.llm_server.enqueue(Script(chunks=[role_chunk(), *text_chunks("先到的部分，"), Pause(0.5), *text_chunks("后到的部分。")]))
    msg_id, _ = await env.ask("慢问题")
    await env.fake.wait_for(lambda: bool(env.cards()))
    await env.fake.drop_socket()
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done"
    assert "先到的部分，后到的部分。" in env.cards()[0].content
    await env.fake.wait_connected()
    assert env.fake.connections_opened == 2, "the client reconnected through connections/open"


async def test_gateway_pings_are_acked_and_a_disconnect_request_reconnects(make_env):
    env = await make_env()
    ping = await env.fake.push_system("ping", {"opaque": "abc"})
    ack = await env.fake.wait_ack(ping)
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"opaque": "abc"}
    await env.fake.push_system("disconnect")
    await env.fake.wait_for(lambda: env.fake.connections_opened == 2)
    env.llm_server.enqueue(Script.text("重连后的回答。"))
    msg_id, _ = await env.ask("重连后的问题")
    await env.finished(msg_id)
    assert "重连后的回答。" in env.cards()[0].content


async def test_the_composition_root_builds_the_adapter_on_the_runtimes_gateway(make_env):
    from botgateway.cli.run import build_adapter

    env = await make_env()
    runtime = SimpleNamespace(gateway=env.gateway, config=env.config, worker_index=None, budget=RateBudget())
    adapter = build_adapter("dingtalk", env.config.adapters.dingtalk, runtime)  # type: ignore[arg-type]
    make_env.closers.append(adapter.stop)
    assert isinstance(adapter, DingTalkAdapter) and adapter.sink.card is not None
    env.llm_server.enqueue(Script.text("组合根构建的适配器。"))
    data = bot_message("谁构建了我？", webhook=env.fake.session_webhook(GROUP), conversation_id=GROUP)
    submission = await adapter.handle(data)  # submitted to the runtime's gateway, no start() needed
    assert submission is not None and submission.done is not None
    assert (await asyncio.wait_for(submission.done, 15)).outcome == "done"
    assert "组合根构建的适配器。" in env.cards()[0].content


async def test_refused_credentials_fail_the_start_with_a_plain_reason(make_env):
    fake = await make_env.fake()
    with pytest.raises(ValueError, match="client_secret") as info:
        await make_env(fake=fake, client_secret="rotated-secret-xyz")
    assert "rotated-secret-xyz" not in str(info.value)


# --- media ------------------------------------------------------------------------------------


async def test_an_image_gets_a_polite_note_and_rich_text_keeps_its_text(make_env):
    env = await make_env()
    await env.ask("", msgtype="picture", content={"downloadCode": "dl-1"}, msg_id="msgPicture")
    await env.adapter.drain()
    await env.fake.wait_for(lambda: len(env.fake.messages) == 1)
    assert "只能读文字" in env.fake.messages[0].text
    assert env.llm_server.requests == [] and env.cards() == []
    # DingTalk redelivers when the bot is slow: the note is not sent twice.
    await env.ask("", msgtype="picture", content={"downloadCode": "dl-1"}, msg_id="msgPicture")
    await env.adapter.drain()
    assert len(env.fake.messages) == 1

    env.llm_server.enqueue(Script.text("看到了文字部分。"))
    rich = {"richText": [{"text": "这台机器"}, {"downloadCode": "dl-2", "type": "picture"}, {"text": "是干什么的？"}]}
    msg_id, _ = await env.ask("", msgtype="richText", content=rich)
    await env.finished(msg_id)
    question = env.llm_server.requests[0]["messages"][-1]["content"]
    assert question.startswith("这台机器\n是干什么的？") and MEDIA_HINT in question
    assert "看到了文字部分。" in env.cards()[0].content


# --- without a template, throttling, tokens ------------------------------------------------------


async def test_without_a_template_each_turn_is_exactly_one_markdown_reply(make_env):
    env = await make_env(card_template_id="")
    env.llm_server.enqueue(
        Script.tool_calls([("c1", "find_host", {"ip": "10.0.1.100"})]),
        Script.text(ANSWER, chunk_size=3, delay_s=0.005),
    )
    msg_id, _ = await env.ask("10.0.1.100 是哪台机器？", staff_id="staff001")
    await env.finished(msg_id)
    assert env.fake.card_calls() == []
    [reply] = env.fake.messages
    assert reply.via == "webhook" and reply.msg_key == "markdown"
    assert reply.body["at"]["atUserIds"] == ["staff001"]
    assert ANSWER in reply.text
    assert reply.text.index("find_host") < reply.text.index(ANSWER), "tool summary above the answer"


async def test_an_expired_token_is_refreshed_and_the_card_still_finishes(make_env):
    env = await make_env()
    env.llm_server.enqueue(Script.text("第一个回答。"), Script.text("第二个回答。"))
    first, _ = await env.ask("第一个问题", conversation_id="cidA==")
    await env.finished(first)
    env.fake.expire_tokens()
    second, _ = await env.ask("第二个问题", conversation_id="cidB==")
    await env.finished(second)
    assert len(env.fake.tokens_issued) == 2
    assert any(c.status == 401 for c in env.fake.card_calls())
    assert env.cards("cidB==")[0].finalized and "第二个回答。" in env.cards("cidB==")[0].content


async def test_a_qps_limit_storm_stays_in_budget_delivers_the_answer_and_then_degrades(make_env):
    env = await make_env(throttle_degrade_after=3, degrade_for_s=600)
    env.fake.fail_next("/v1.0/card/streaming", "qps", times=4)
    env.llm_server.enqueue(Script.text(ANSWER, chunk_size=3, delay_s=0.02))
    msg_id, _ = await env.ask("风暴中的问题")
    await env.finished(msg_id, timeout=30)
    [card] = env.cards()
    assert card.finalized and ANSWER in card.content
    assert env.fake.throttled() == 4
    calls = env.fake.card_calls()
    assert len(calls) <= 4 + 10, f"throttles pause and coalesce instead of hammering: {len(calls)} calls"
    throttled_at = [c.at for c in calls if c.status == 403]
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(throttled_at)), "each throttle waits for a fresh second"
    assert env.fake.max_card_calls_per_second() < 20
    assert env.adapter.monitor.degraded

    env.llm_server.enqueue(Script.text("降级后的回答。"))
    after, _ = await env.ask("降级后的问题", conversation_id="cidLater==", staff_id="staff002")
    await env.finished(after)
    assert env.cards("cidLater==") == [], "while degraded, new turns get no card"
    [reply] = [m for m in env.fake.messages if m.chat == "cidLater=="]
    assert "降级后的回答。" in reply.text


async def test_ten_concurrent_group_questions_stay_under_20_qps_with_exact_answers(make_env):
    answers = {f"cidGroup{i:02d}==": f"第 {i} 个回答：" + ANSWER for i in range(10)}

    def responder(body: dict[str, Any]) -> Script:
        question = body["messages"][-1]["content"]
        return Script.text(answers[question], chunk_size=3, delay_s=0.03)

    fake = await make_env.fake(qps_limit=None)
    env = await make_env(fake=fake, responder=responder)
    asks = await asyncio.gather(*(env.ask(cid, conversation_id=cid, staff_id=f"s{n}") for n, cid in enumerate(answers)))
    outcomes = await asyncio.gather(*(env.finished(msg_id, timeout=60) for msg_id, _ in asks))
    assert [o.outcome for o in outcomes] == ["done"] * 10
    for cid, answer in answers.items():
        [card] = env.cards(cid)
        assert card.finalized and card.updates[-1]["isFinalize"]
        assert answer in card.updates[-1]["content"]
    assert len(fake.card_calls()) >= 30
    assert sum(o.metrics.budget_wait_s for o in outcomes) > 0, "the cards wanted more than the budget (the test applies pressure)"
    # The fake throttles the 21st call within a second, as DingTalk does: 20 in one second is within the limit.
    assert fake.max_card_calls_per_second() <= 20, fake.max_card_calls_per_second()
    assert fake.throttled() == 0


# --- crash recovery -----------------------------------------------------------------------------


async def test_crash_recovery_resumes_the_question_into_the_card_left_open(make_env):
    fake = await make_env.fake()
    crashed = await make_env(fake=fake, db="shared.db")
    crashed.llm_server.enqueue(Script(chunks=[role_chunk(), *text_chunks("回答到一半"), Pause(30)]))
    await crashed.ask("会被中断的问题")
    await fake.wait_for(lambda: any("回答到一半" in u["content"] for c in fake.cards.values() for u in c.updates))
    async with asyncio.timeout(10):  # the card's record is written behind it, by a task of its own
        while not (cards := await crashed.store.open_cards()):
            await asyncio.sleep(0.01)
    [open_card] = cards
    card = fake.cards[open_card.card_id]
    assert not card.finalized
    # The first process stops acting (crashed); a new one starts on the same store.
    await crashed.adapter.stop()
    restarted = await make_env(fake=fake, db="shared.db")
    restarted.llm_server.enqueue(Script.text("完整的回答。"))
    # What `botgateway run` does once its adapters are up: the question (no tool called) is answered again.
    assert await restarted.gateway.recovery.recover_open_cards({"dingtalk": restarted.adapter.sink}) == 1
    [resumed] = await restarted.store.open_cards()  # the same card, its record now the resumed turn's
    assert resumed.card_id == open_card.card_id and resumed.resume["resumed_from"] == open_card.turn_id
    outcome = await asyncio.wait_for(restarted.gateway.wait_turn(resumed.turn_id), 15)
    assert outcome is not None and outcome.outcome == "done"
    assert card.finalized and not card.error and "完整的回答。" in card.updates[-1]["content"]
    assert "重启后已继续回答" in card.updates[-1]["content"]
    assert len(fake.cards) == 1  # the same card, no other
    assert await restarted.store.open_cards() == []


# --- HTTP callback mode ---------------------------------------------------------------------------


async def test_http_callback_mode_verifies_and_answers(make_env):
    env = await make_env(mode="http", http_host="127.0.0.1", http_port=free_port())
    env.llm_server.enqueue(Script.text("回调模式的回答。"))
    url = env.adapter.callback_server.url
    data = bot_message("回调问题", msg_id="msgHttp1", webhook=env.fake.session_webhook(GROUP), conversation_id=GROUP)
    stamp = str(int(time.time() * 1000))
    async with aiohttp.ClientSession() as session:
        bad = await session.post(url, json=data, headers={"timestamp": stamp, "sign": sign(stamp, "nope")})
        assert bad.status == 401
        ok = await session.post(url, json=data, headers={"timestamp": stamp, "sign": sign(stamp, env.fake.client_secret)})
        assert ok.status == 200
    await env.finished("msgHttp1")
    [card] = env.cards()
    assert card.finalized and "回调模式的回答。" in card.content
    assert [m for m, _ in env.adapter.submissions] == ["msgHttp1"]


# --- long answers ------------------------------------------------------------------------------------


async def test_a_long_answer_continues_in_a_second_card(make_env):
    env = await make_env(max_card_chars=200)
    sentences = [f"第{i:02d}句：主机 web-{i:02d} 运行正常，负载很低。" for i in range(1, 26)]
    long_answer = "".join(sentences)
    env.llm_server.enqueue(Script.text(long_answer, chunk_size=8, delay_s=0.005))
    msg_id, _ = await env.ask("列出所有主机的状态", nick="张三")
    await env.finished(msg_id)
    cards = env.cards()
    assert len(cards) >= 3, "about 500 characters at 200 per card"
    finals = [c.updates[-1]["content"] for c in cards]
    assert all(c.finalized for c in cards)
    assert "接下一条消息" in finals[0] and "第 2 部分" in finals[1] and "**@张三**" in finals[1]
    for sentence in sentences:
        assert sum(sentence in f for f in finals) == 1, f"{sentence} appears exactly once across the cards"
    order = [next(i for i, f in enumerate(finals) if s in f) for s in sentences]
    assert order == sorted(order), "the parts keep the answer's order"


async def test_a_session_webhook_outside_dingtalk_is_never_called(make_env):
    env = await make_env(card_template_id="")
    env.llm_server.enqueue(Script.text("安全的回答。"))
    msg_id, _ = await env.ask("问题", webhook="http://127.0.0.1:9/robot/sendBySession?session=forged")
    await env.finished(msg_id)
    [reply] = env.fake.messages
    assert reply.via == "group" and "安全的回答。" in reply.text
