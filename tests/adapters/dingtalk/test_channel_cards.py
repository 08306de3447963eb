"""Cards nobody asked for on DingTalk: the preamble above the card, group targets, and messages that quote.

Renderings are checked as data; cards and messages go to the fake DingTalk
through the adapter's real sink, and quoting messages arrive through the fake
Stream gateway.
"""

from __future__ import annotations

import dataclasses

from pydantic import SecretStr

from adapters.dingtalk import DingTalkAdapter
from adapters.dingtalk.message import Quote, parse_bot_message
from adapters.dingtalk.render import render_card, render_reply
from botgateway.config import DingTalkConfig
from botgateway.messages import InboundMessage, Submission
from botgateway.sink import CardTarget, ChannelCards
from botgateway.snapshot import CardSnapshot, ToolLine
from tests.fakes.dingtalk import bot_message
from tests.fakes.dingtalk_env import GROUP
from tools.demo.script import Script

ALERT = "🔥 **告警中** · critical · A-3F9C2B @所有人\n\n- HighCPU 10.0.1.100 ![g](http://evil.example/x?d=1)"
TOOL = ToolLine(call_id="c1", name="search_inventory_by_ip", args_preview="ip=10.0.1.100", status="done",
                duration_s=0.4, summary="1 台主机")
CARD_QUOTE = {"msgType": "interactiveCard", "msgId": "msgCard01", "senderId": "$:LWCP_v1:$bot",
              "content": {"text": "[Interactive Card Message]"}}


def _inert(text: str) -> None:
    assert "@所有人" not in text and "@\u200b所有人" in text  # shown, notifies nobody
    assert "![g](" not in text and "http://evil.example/x?d=1" in text  # shown as text, never fetched


# --- rendering ------------------------------------------------------------------------------


def test_the_card_shows_the_preamble_first_then_the_asker_and_the_investigation() -> None:
    live = CardSnapshot(status="streaming", preamble=ALERT, blocks=(TOOL,), answer="是 prod-db-01", locale="zh-CN",
                        asker="张三")
    text = render_card(live, is_group=True)
    assert text.startswith("🔥 **告警中** · critical · A-3F9C2B")
    assert text.index("A-3F9C2B") < text.index("张三") < text.index("search_inventory_by_ip") < text.index("prod-db-01")
    assert "\n\n" in text[text.index("evil.example"):text.index("张三")]  # a blank line sets it apart
    _inert(text)


def test_a_final_card_or_reply_of_a_preamble_alone_is_just_the_preamble() -> None:
    final = CardSnapshot(status="done", preamble=ALERT, locale="zh-CN")
    card = render_card(final, is_group=True)
    title, reply = render_reply(final, is_group=True)
    assert card == reply and card.startswith("🔥 **告警中**") and "http://evil.example/x?d=1" in card.splitlines()[-1]
    assert "思考" not in card and "▌" not in card
    _inert(card)
    assert title.startswith("🔥") and "告警中" in title and len(title) <= 30  # the notification names the alert


def test_a_markdown_reply_puts_the_preamble_above_the_tool_summary_and_the_answer() -> None:
    done = CardSnapshot(status="done", preamble=ALERT, blocks=(TOOL,), answer="prod-db-01 归 dba-team。", locale="zh-CN")
    title, text = render_reply(done, is_group=True, mention="@staff001")
    order = [text.index(part) for part in ("A-3F9C2B", "@staff001", "search_inventory_by_ip", "dba-team")]
    assert order == sorted(order)
    assert "告警中" in title
    _inert(text)


# --- group targets ------------------------------------------------------------------------------


async def test_with_a_template_a_channel_card_is_an_ai_card_in_the_group(make_env) -> None:
    env = await make_env()
    adapter = env.adapter
    assert isinstance(adapter, ChannelCards) and adapter.edits_in_place is True
    target = adapter.channel_target("cidOps02==", locale="zh-CN")
    assert target == CardTarget(platform="dingtalk", chat_id="cidOps02==", is_group=True, locale="zh-CN",
                                workspace_id=env.fake.client_id, extra={"mode": "card"})
    handle = await adapter.sink.create(dataclasses.replace(target, turn_id="alert-a-3f9c2b"),
                                       CardSnapshot(status="done", preamble=ALERT, locale="zh-CN"))
    [card] = env.fake.cards_in("dtv1.card//IM_GROUP.cidOps02==")
    assert card.create_body["imGroupOpenDeliverModel"]["robotCode"] == env.fake.client_id
    # what a message quoting the card will name it by (its originalProcessQueryKey)
    assert handle.data == {"mode": "card", "quote_key": "c1"}
    assert card.content.startswith("🔥 **告警中**") and "思考" not in card.content
    await adapter.sink.update(handle, CardSnapshot(status="working", preamble=ALERT, blocks=(TOOL,), locale="zh-CN"))
    assert card.content.startswith("🔥 **告警中**") and "search_inventory_by_ip" in card.content
    assert await adapter.adopt_thread(handle) is None  # a group has no threads; a reply quotes the card
    assert env.fake.messages == []


async def test_without_a_template_each_change_is_a_robot_group_message(make_env) -> None:
    env = await make_env(card_template_id="")
    adapter = env.adapter
    assert adapter.edits_in_place is False
    target = adapter.channel_target("cidOps02==", locale="zh-CN")
    assert target.extra == {"mode": "markdown"} and target.user_id == ""
    handle = await adapter.sink.create(target, CardSnapshot(status="working", preamble=ALERT, locale="zh-CN"))
    await adapter.sink.finalize(handle, CardSnapshot(status="done", preamble=ALERT, locale="zh-CN"))
    [sent] = env.fake.messages
    assert sent.via == "group" and sent.chat == "cidOps02=="  # no session webhook: the robot's group send
    assert sent.text.startswith("🔥 **告警中**") and "告警中" in sent.title
    _inert(sent.text)
    assert env.fake.card_calls() == []


# --- quotes -----------------------------------------------------------------------------------


def test_a_quote_is_read_from_every_shape_it_comes_in() -> None:
    text = parse_bot_message(bot_message("谁负责？", quoted="🔥 告警中 A-3F9C2B", quoted_key="q1"))
    assert text.quote is not None and text.quote.text == "🔥 告警中 A-3F9C2B" and text.quote.msg_type == "text"
    assert text.quote.process_query_key == "q1" and text.quote.msg_id.startswith("msg")
    assert text.text.text == "谁负责？"  # the question is still only what the asker wrote

    rich = {"msgType": "richText", "msgId": "m2", "senderId": "s2", "content": {"richText": [
        {"type": "text", "text": "第一段"}, {"type": "picture", "downloadCode": "dl"},
        {"msgType": "text", "content": "第二段"}]}}
    assert parse_bot_message(bot_message("?", quoted=rich)).quote == Quote(text="第一段\n第二段", msg_id="m2",
                                                                        msg_type="richText", sender_id="s2")
    card = parse_bot_message(bot_message("还在告警吗？", quoted=CARD_QUOTE, quoted_key="c7")).quote
    assert card == Quote(text="[Interactive Card Message]", msg_id="msgCard01", msg_type="interactiveCard",
                         sender_id="$:LWCP_v1:$bot", process_query_key="c7")
    as_string = bot_message("?", quoted={"msgType": "text", "content": "纯字符串"})
    assert parse_bot_message(as_string).quote == Quote(text="纯字符串", msg_type="text")

    assert parse_bot_message(bot_message("普通问题")).quote is None
    for odd in ({"isReplyMsg": True}, {"isReplyMsg": True, "repliedMsg": "x"},
                {"isReplyMsg": True, "repliedMsg": {"content": {"richText": "不是列表", "text": 3}, "msgId": {}}}):
        payload = bot_message("?")
        payload["text"].update(odd)
        assert parse_bot_message(payload).quote == Quote(text="")  # odd fields: an empty quote, never an error
    assert parse_bot_message({**bot_message("?"), "text": "字符串正文"}).quote is None


class _Recorder:
    """Stands in for the gateway: keeps what the adapter submits."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def submit(self, message: InboundMessage, sink: object, policy: object) -> Submission:
        self.messages.append(message)
        return Submission(status="started", turn_id=f"t{len(self.messages)}")

    async def first_delivery(self, platform: str, key: str) -> bool:
        return True


async def test_the_adapter_hands_the_quoted_text_and_the_quoted_cards_key_to_the_gateway() -> None:
    gateway = _Recorder()
    config = DingTalkConfig(client_id="dingapp", client_secret=SecretStr("s"), card_template_id="tpl.schema")
    adapter = DingTalkAdapter(config, gateway=gateway)  # type: ignore[arg-type]
    try:
        await adapter.handle(bot_message("这台机器归谁？", conversation_id=GROUP, quoted="🔥 告警中 A-3F9C2B"))
        await adapter.handle(bot_message("还在告警吗？", conversation_id=GROUP, quoted=CARD_QUOTE, quoted_key="c7"))
        await adapter.handle(bot_message("普通问题", conversation_id=GROUP))
    finally:
        await adapter.api.aclose()
    quoting_text, quoting_card, plain = gateway.messages
    assert (quoting_text.text, quoting_text.quoted) == ("这台机器归谁？", "🔥 告警中 A-3F9C2B")
    assert quoting_text.quoted_key == ""
    # a quoted card comes without its text: its carrierId is what names it
    assert quoting_card.quoted == "[Interactive Card Message]" and quoting_card.quoted_key == "c7"
    assert plain.quoted == "" and plain.quoted_key == ""


async def test_a_message_quoting_the_card_is_answered_like_any_question(make_env) -> None:
    env = await make_env()
    env.llm_server.enqueue(Script.text("prod-db-01 归 dba-team。"))
    msg_id, _ = await env.ask("这台机器归谁？", quoted=CARD_QUOTE, quoted_key="c1")
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done" and outcome.answer == "prod-db-01 归 dba-team。"
    assert env.llm_server.requests[0]["messages"][-1] == {"role": "user", "content": "这台机器归谁？"}
    [card] = env.cards()
    assert "prod-db-01" in card.content

