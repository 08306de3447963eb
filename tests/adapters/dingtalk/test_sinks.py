"""DingTalk OpenAPI client, sinks, rendering and template, against the fake DingTalk on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from importlib import resources

import pytest

from adapters.dingtalk.card_sink import DingTalkCardSink
from adapters.dingtalk.markdown_sink import DingTalkMarkdownSink, MarkdownSender
from adapters.dingtalk.openapi import DingTalkOpenAPI
from adapters.dingtalk.render import render_card, render_reply
from adapters.dingtalk.sink import DingTalkSink
from adapters.dingtalk.throttle import ThrottleMonitor
from botgateway.budget import RateBudget
from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.sink import CardGone, CardHandle, CardTarget, PermanentError, RateLimited, TransientError
from botgateway.snapshot import CardSnapshot, Narration, ToolLine
from tests.fakes.dingtalk import FakeDingTalk

GROUP = "cidGroupAbc=="


@pytest.fixture
async def fake():
    async with FakeDingTalk() as fake:
        yield fake


@pytest.fixture
async def api(fake):
    client = DingTalkOpenAPI(client_id=fake.client_id, client_secret=fake.client_secret, base_url=fake.base_url)
    yield client
    await client.aclose()


def group_target(fake: FakeDingTalk, **extra) -> CardTarget:
    return CardTarget(
        platform="dingtalk",
        chat_id=GROUP,
        user_id="staff42",
        user_name="李四",
        is_group=True,
        locale="zh-CN",
        extra={
            "mode": "card",
            "session_webhook": fake.session_webhook(GROUP),
            "session_webhook_expires_ms": int(time.time() * 1000) + 3_600_000,
            **extra,
        },
    )


def sinks(api: DingTalkOpenAPI, monitor: ThrottleMonitor | None = None) -> tuple[DingTalkCardSink, DingTalkMarkdownSink]:
    sender = MarkdownSender(api, robot_code="dingfakeappkey")
    card = DingTalkCardSink(
        api, template_id="tpl.schema", robot_code="dingfakeappkey", content_key="content", sender=sender, monitor=monitor
    )
    return card, DingTalkMarkdownSink(sender, robot_code="dingfakeappkey", max_chars=3000)


WORKING = CardSnapshot(
    status="working",
    blocks=(ToolLine("c1", "find_host", "ip=10.0.1.100", "running"),),
    locale="zh-CN",
    asker="李四",
)
DONE = CardSnapshot(
    status="done",
    blocks=(
        Narration(1, "我先查一下。"),
        ToolLine("c1", "find_host", "ip=10.0.1.100", "done", 1.2, "1 台主机"),
    ),
    answer="10.0.1.100 是 **web-01**，运行中。",
    footer="第 2/6 轮 · 1.5 秒",
    locale="zh-CN",
    asker="李四",
)


# --- token -------------------------------------------------------------------------------


async def test_token_is_cached_and_refreshed_once_after_401(fake, api):
    card, _ = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    await card.update(handle, WORKING)
    assert len(fake.tokens_issued) == 1, "the token is cached between calls"

    fake.expire_tokens()
    await asyncio.gather(*(card.update(handle, WORKING) for _ in range(5)))
    assert len(fake.tokens_issued) == 2, "five calls that saw 401 refresh the token once"
    rejected = [c for c in fake.card_calls() if c.status == 401]
    assert rejected and all(c.token == fake.tokens_issued[0] for c in rejected)
    assert all(c.token == fake.tokens_issued[1] for c in fake.card_calls()[-5:])


async def test_scripted_401_is_retried_with_a_fresh_token(fake, api):
    card, _ = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    fake.fail_next("/v1.0/card/streaming", "401")
    await card.finalize(handle, DONE)
    assert fake.cards[handle.card_id].finalized
    assert len(fake.tokens_issued) == 2


async def test_wrong_credentials_are_a_permanent_error_without_the_secret(fake):
    client = DingTalkOpenAPI(client_id=fake.client_id, client_secret="wrong-secret-value", base_url=fake.base_url)
    try:
        with pytest.raises(PermanentError) as info:
            await client.access_token()
        assert "client_secret" in str(info.value) and "wrong-secret-value" not in str(info.value)
    finally:
        await client.aclose()


# --- cards -------------------------------------------------------------------------------


async def test_group_card_is_created_and_streamed_with_full_snapshots(fake, api):
    card, _ = sinks(api)
    target = group_target(fake)
    handle = await card.create(target, WORKING)
    body = fake.cards[handle.card_id].create_body
    assert body["cardTemplateId"] == "tpl.schema"
    assert body["openSpaceId"] == f"dtv1.card//IM_GROUP.{GROUP}"
    assert body["imGroupOpenDeliverModel"]["robotCode"] == "dingfakeappkey"
    assert "**@李四**" in body["cardData"]["cardParamMap"]["content"]

    streaming = CardSnapshot(status="streaming", answer="10.0.1.100 是", locale="zh-CN", asker="李四")
    await card.update(handle, streaming)
    await card.finalize(handle, DONE)
    updates = fake.cards[handle.card_id].updates
    assert [u["isFinalize"] for u in updates] == [False, True]
    assert all(u["isFull"] and u["key"] == "content" and not u["isError"] for u in updates)
    assert updates[0]["content"].endswith("10.0.1.100 是▌")
    assert DONE.answer in updates[1]["content"] and "▌" not in updates[1]["content"]
    assert len({u["guid"] for u in updates}) == 2


async def test_direct_chat_card_goes_to_the_robot_space_of_the_staff_id(fake, api):
    card, _ = sinks(api)
    target = CardTarget(platform="dingtalk", chat_id="cidDirect==", user_id="staff7", user_name="王五", is_group=False, extra={"mode": "card"})
    handle = await card.create(target, WORKING)
    body = fake.cards[handle.card_id].create_body
    assert body["openSpaceId"] == "dtv1.card//IM_ROBOT.staff7"
    assert body["imRobotOpenDeliverModel"]["spaceType"] == "IM_ROBOT"
    assert "@王五" not in body["cardData"]["cardParamMap"]["content"], "no asker line in a 1:1 chat"


async def test_a_card_created_but_not_delivered_is_a_permanent_error(fake, api):
    card, _ = sinks(api)
    fake.undeliverable_spaces.add(f"dtv1.card//IM_GROUP.{GROUP}")
    with pytest.raises(PermanentError, match="could not deliver") as info:
        await card.create(group_target(fake), WORKING)
    assert "机器人不在群内" in str(info.value) and fake.client_secret not in str(info.value)


async def test_failed_turn_finalizes_with_is_error(fake, api):
    card, _ = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    failed = CardSnapshot(status="failed", answer="部分", error="⚠️ 无法连接模型", locale="zh-CN")
    await card.finalize(handle, failed)
    last = fake.cards[handle.card_id].updates[-1]
    assert last["isFinalize"] and last["isError"]
    assert "无法连接模型" in last["content"]


async def test_throttle_answers_become_rate_limited_and_degrade_after_repeats(fake, api):
    monitor = ThrottleMonitor(window_s=60, threshold=3, degrade_for_s=300)
    card, _ = sinks(api, monitor)
    handle = await card.create(group_target(fake), WORKING)
    fake.fail_next("/v1.0/card/streaming", "qps", times=2)
    fake.fail_next("/v1.0/card/streaming", "429")
    for _ in range(2):
        with pytest.raises(RateLimited) as info:
            await card.update(handle, WORKING)
        assert info.value.retry_after == 1.0, "QpsLimit: wait for the next one-second window"
    assert not monitor.degraded
    with pytest.raises(RateLimited) as info:
        await card.update(handle, WORKING)
    assert info.value.retry_after == 2.0, "429 honours Retry-After"
    assert monitor.degraded


async def test_server_errors_are_transient_and_unknown_cards_are_gone(fake, api):
    card, _ = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    fake.fail_next("/v1.0/card/streaming", "500")
    with pytest.raises(TransientError):
        await card.update(handle, WORKING)
    with pytest.raises(CardGone):
        await card.update(CardHandle("bg-unknown", handle.target), WORKING)


async def test_the_card_api_shares_one_bucket_for_every_chat(api, fake):
    card, markdown = sinks(api)
    a, b = group_target(fake), CardTarget(platform="dingtalk", chat_id="other", is_group=False, user_id="u")
    keys = {card.rate_key(op, t)[0] for op in ("create", "update", "finalize") for t in (a, b)}
    assert len(keys) == 1
    limit = card.rate_key("update", a)[1]
    # 20 calls a second as DingTalk counts them (on arrival), half of them at once.
    assert (limit.rate_per_s, limit.burst, limit.arrivals_per_s, limit.arrival_window_s) == (20, 10, 20, 1.0)
    assert markdown.rate_key("update", a)[0] != card.rate_key("update", a)[0]


async def test_calls_bunched_on_their_way_never_push_a_second_past_the_qps_limit(api):
    """A stalled network holds calls sent apart and lets them arrive together. A call counts from its grant until
    a second after its answer, so whatever arrives together, no second sees more calls than the limit."""
    async with FakeDingTalk(qps_limit=5) as fake:
        client = DingTalkOpenAPI(client_id=fake.client_id, client_secret=fake.client_secret, base_url=fake.base_url)
        sender = MarkdownSender(client, robot_code="dingfakeappkey")
        card = DingTalkCardSink(client, template_id="tpl.schema", robot_code="dingfakeappkey", content_key="content",
                                sender=sender, qps=5)
        budget, target = RateBudget(), group_target(fake)

        async def create(i: int) -> CallOutcome:
            caller = CardCaller(budget, lambda op: card.rate_key(op, target), owner=f"card-{i}", platform="dingtalk")
            return await caller.call("create", lambda: card.create(target, WORKING), deadline=None)

        try:
            fake.hold_arrivals()
            creating = [asyncio.create_task(create(i)) for i in range(10)]
            await fake.wait_for(lambda: fake.held >= 5)  # a second's worth of calls sent, none arrived
            await fake.release_arrivals()
            assert await asyncio.gather(*creating) == [CallOutcome.OK] * 10
        finally:
            await client.aclose()
        assert fake.throttled() == 0
        assert fake.max_card_calls_per_second() == 5  # the five held arrived together; the rest a second later
        assert len(fake.card_calls()) == 10


async def test_an_open_card_is_finalized_from_its_stored_target_alone(fake, api):
    card, markdown = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    # What the gateway rebuilds from the Store after a restart: id and target, no sink data.
    rebuilt = CardHandle(card_id=handle.card_id, target=group_target(fake))
    router = DingTalkSink(markdown, card)
    interrupted = CardSnapshot(status="failed", error="机器人重启，回答被中断，请重新提问。", locale="zh-CN")
    await router.finalize(rebuilt, interrupted)
    fake_card = fake.cards[handle.card_id]
    assert fake_card.finalized and fake_card.error
    assert "请重新提问" in fake_card.content


# --- markdown replies ---------------------------------------------------------------------


async def test_markdown_sink_sends_exactly_one_reply_through_the_webhook(fake, api):
    _, markdown = sinks(api)
    target = group_target(fake, mode="markdown")
    handle = await markdown.create(target, WORKING)
    await markdown.update(handle, WORKING)
    assert fake.messages == [] and fake.card_calls() == []
    await markdown.finalize(handle, DONE)
    assert len(fake.messages) == 1
    sent = fake.messages[0]
    assert sent.via == "webhook" and sent.chat == GROUP
    assert sent.body["at"]["atUserIds"] == ["staff42"] and sent.text.startswith("@staff42")
    summary_at = sent.text.index("find_host")
    assert summary_at < sent.text.index(DONE.answer), "tool summary above the answer"
    assert sent.title.startswith("10.0.1.100")


async def test_markdown_reply_uses_the_openapi_once_the_webhook_expired(fake, api):
    _, markdown = sinks(api)
    expired = group_target(fake, mode="markdown", session_webhook_expires_ms=int(time.time() * 1000) - 1)
    await markdown.finalize(await markdown.create(expired, WORKING), DONE)
    direct = CardTarget(platform="dingtalk", chat_id="cidD", user_id="staff7", is_group=False, locale="zh-CN", extra={"mode": "markdown"})
    await markdown.finalize(await markdown.create(direct, WORKING), DONE)
    assert [(m.via, m.chat, m.msg_key) for m in fake.messages] == [
        ("group", GROUP, "sampleMarkdown"),
        ("oto", "staff7", "sampleMarkdown"),
    ]
    assert DONE.answer in fake.messages[0].text and "**@李四**" in fake.messages[0].text


async def test_a_skipped_1to1_recipient_is_an_error_not_a_silent_success(fake, api):
    _, markdown = sinks(api)
    fake.invalid_staff.add("staff8")
    direct = CardTarget(platform="dingtalk", chat_id="cidD", user_id="staff8", is_group=False, locale="zh-CN", extra={"mode": "markdown"})
    with pytest.raises(PermanentError, match="not a valid recipient"):
        await markdown.finalize(await markdown.create(direct, WORKING), DONE)
    assert fake.messages == []


async def test_a_refused_webhook_falls_back_to_the_openapi(fake, api):
    _, markdown = sinks(api)
    fake.expired_sessions.add(GROUP)
    await markdown.fallback(group_target(fake, mode="markdown"), DONE)
    assert [m.via for m in fake.messages] == ["group"]


# --- rendering and template ------------------------------------------------------------------


def test_card_rendering_shows_asker_tools_thought_cursor_and_footer():
    working = CardSnapshot(
        status="working",
        blocks=(ToolLine("c1", "find_host", "ip=10.0.1.100", "running"),),
        thought="正在考虑用哪个工具",
        locale="zh-CN",
        asker="李四",
    )
    text = render_card(working, is_group=True)
    assert text.index("**@李四**") < text.index("find_host") < text.index("正在考虑")
    assert "common_level3_base_color" in text
    streaming = render_card(CardSnapshot(status="streaming", answer="答", locale="zh-CN"))
    assert streaming == "答▌"
    final = render_card(DONE, is_group=True)
    assert "▌" not in final and final.endswith("第 2/6 轮 · 1.5 秒</font>")
    part2 = render_card(CardSnapshot(status="done", answer="续", part=2, locale="zh-CN", asker="李四"), is_group=True)
    assert "第 2 部分" in part2 and "find_host" not in part2


def test_reply_rendering_keeps_the_answer_exact_and_summarizes_many_tools():
    lines = tuple(ToolLine(f"c{i}", f"tool{i}", "", "done", 0.1, "ok") for i in range(8))
    snap = CardSnapshot(status="done", blocks=lines, answer="line1\nline2 `code`", locale="en")
    title, text = render_reply(snap)
    assert "line1\nline2 `code`" in text
    assert "8 tool call(s)" in text and "3 earlier" in text and "tool7" in text and "tool2" not in text
    assert title == "line1"


def test_the_card_template_declares_the_streaming_content_variable():
    raw = resources.files("adapters.dingtalk").joinpath("card_template.json").read_text(encoding="utf-8")
    editor = json.loads(json.loads(raw)["editorData"])
    names = [v["name"] for v in editor["variableList"]]
    assert names == ["content"]
    block = editor["schema"]["componentsTree"][0]
    assert block["props"]["content"]["variable"] == "content" and block["props"]["isStreaming"] is True


async def test_a_markdown_turn_left_open_is_answered_with_the_interrupted_note(fake, api):
    card, markdown = sinks(api)
    router = DingTalkSink(markdown, card)
    target = group_target(fake, mode="markdown")
    handle = await router.create(target, WORKING)
    assert fake.card_calls() == [] and handle.card_id.startswith("md-")
    rebuilt = CardHandle(card_id=handle.card_id, target=CardTarget(**{**target.__dict__, "extra": {}}))
    await router.finalize(rebuilt, CardSnapshot(status="failed", error="机器人重启，回答被中断，请重新提问。", locale="zh-CN"))
    assert fake.card_calls() == [], "a markdown turn never becomes a card, even without its stored mode"
    [sent] = fake.messages
    assert "请重新提问" in sent.text and sent.via == "group"


async def test_a_token_rejected_twice_is_a_permanent_error(fake, api):
    card, _ = sinks(api)
    handle = await card.create(group_target(fake), WORKING)
    fake.fail_next("/v1.0/card/streaming", "401", times=2)
    with pytest.raises(PermanentError, match="rejected too"):
        await card.update(handle, WORKING)
    assert len(fake.tokens_issued) == 2, "one refresh, not a loop"
