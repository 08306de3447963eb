"""Every shape a DingTalk bot message can take, through the fake Stream gateway and the HTTP callback.

A message the adapter can read is answered (a question reaches the model, an
image gets its note); one it cannot read is still acked, logged once with its
msgId, and answered with a short note. No shape ends in a traceback or in silence.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from adapters.dingtalk import sign
from adapters.dingtalk.message import parse_bot_message
from botgateway.strings import t
from tests.adapters.log_lines import LogLines, captured_log
from tests.fakes.dingtalk import bot_message
from tests.fakes.dingtalk_env import GROUP, Env
from tests.ports import free_port
from tools.demo.script import Script

IMAGE_NOTE = t("zh-CN", "images_ignored")
EMPTY_NOTE = t("zh-CN", "empty_question")
UNREADABLE_NOTE = t("zh-CN", "message_unreadable")

# (what, fields replacing those of a plain text message, what the adapter does: a question or a note)
SHAPES: list[tuple[str, dict[str, Any], str]] = [
    ("text as an object", {"text": {"content": " 10.0.1.100 是哪台？ "}}, "10.0.1.100 是哪台？"),
    ("text as a string", {"text": "10.0.1.100 是哪台？"}, "10.0.1.100 是哪台？"),
    ("text with extra keys", {"text": {"content": "问题", "isReplyMsg": True}}, "问题"),
    ("no msgtype (text)", {"msgtype": None, "text": {"content": "默认文本"}}, "默认文本"),
    ("text null", {"text": None}, EMPTY_NOTE),
    ("text missing", {"text": ...}, EMPTY_NOTE),
    ("text content null", {"text": {"content": None}}, EMPTY_NOTE),
    ("text is a list", {"text": ["a", "b"]}, UNREADABLE_NOTE),
    ("text content is a number", {"text": {"content": 42}}, UNREADABLE_NOTE),
    ("msgtype is a number", {"msgtype": 7}, UNREADABLE_NOTE),
    ("richText", {"msgtype": "richText", "content": {"richText": [{"text": "富文本"}, {"text": "问题"}]}}, "富文本\n问题"),
    ("richText with junk items", {"msgtype": "richText", "content": {"richText": [None, 3, {"text": None}, {"text": "留下"}]}}, "留下"),
    ("richText content null", {"msgtype": "richText", "content": None}, EMPTY_NOTE),
    ("richText is a string", {"msgtype": "richText", "content": {"richText": "不是列表"}}, UNREADABLE_NOTE),
    ("picture", {"msgtype": "picture", "content": {"downloadCode": "dl", "pictureDownloadCode": "p"}}, IMAGE_NOTE),
    ("picture content null", {"msgtype": "picture", "content": None}, IMAGE_NOTE),
    ("picture content a list", {"msgtype": "picture", "content": ["dl"]}, IMAGE_NOTE),
    ("audio recognized", {"msgtype": "audio", "content": {"duration": 3, "downloadCode": "dl", "recognition": "语音问题"}}, "语音问题"),
    ("audio not recognized", {"msgtype": "audio", "content": {"duration": 3, "downloadCode": "dl", "recognition": None}}, IMAGE_NOTE),
    ("video", {"msgtype": "video", "content": {"duration": 3, "downloadCode": "dl", "videoType": "mp4"}}, IMAGE_NOTE),
    ("file", {"msgtype": "file", "content": {"fileName": "a.log", "downloadCode": "dl", "spaceId": "1", "fileId": "2"}}, IMAGE_NOTE),
    ("markdown", {"msgtype": "markdown", "content": {"title": "t", "text": "Markdown 问题"}}, "Markdown 问题"),
    ("markdown as a string", {"msgtype": "markdown", "markdown": "Markdown 字符串"}, "Markdown 字符串"),
    ("an unknown type", {"msgtype": "chatRecord", "content": {"summary": "…"}}, IMAGE_NOTE),
    ("odd side fields", {"sessionWebhookExpiredTime": "soon", "senderNick": {"x": 1}, "isInAtList": "yes"}, "问题 odd"),
]


def shaped(what: str, fields: dict[str, Any], env: Env, msg_id: str) -> dict[str, Any]:
    """A text bot message to ``GROUP`` with ``fields`` put in (``...`` removes a field)."""
    data = bot_message("问题 odd", msg_id=msg_id, conversation_id=GROUP, webhook=env.fake.session_webhook(GROUP))
    for key, value in fields.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def check_outcome(env: Env, log: LogLines, mark: int, what: str, msg_id: str, expected: str, questions: list[str]) -> None:
    """The message was answered as ``expected`` and logged without a traceback."""
    lines = log.since(mark)
    assert all("exception" not in line and "Traceback" not in str(line) for line in lines), (what, lines)
    if expected in (IMAGE_NOTE, EMPTY_NOTE, UNREADABLE_NOTE):
        assert env.fake.messages and expected in env.fake.messages[-1].text, (what, env.fake.messages[-1:])
        unreadable = [line for line in lines if line["event"] == "dingtalk.message_unreadable"]
        if expected == UNREADABLE_NOTE:
            [line] = unreadable
            assert line["msg_id"] == msg_id and line["level"] == "warning", what
        else:
            assert unreadable == [], what
    else:
        assert questions and questions[-1] == expected, (what, questions[-1:])


async def test_every_message_shape_is_answered_over_the_stream(make_env: Any) -> None:
    env = await make_env(card_template_id="")
    questions: list[str] = []
    for n, (what, fields, expected) in enumerate(SHAPES):
        msg_id = f"msgShape{n:02d}"
        if expected not in (IMAGE_NOTE, EMPTY_NOTE, UNREADABLE_NOTE):
            env.llm_server.enqueue(Script.text(f"回答 {n}"))
        sent = len(env.fake.messages)
        with captured_log() as log:
            mark = log.mark()
            frame = await env.fake.push_bot_message(shaped(what, fields, env, msg_id))
            ack = await env.fake.wait_ack(frame)
            assert ack["code"] == 200, (what, ack)
            await env.adapter.drain()
            if expected in (IMAGE_NOTE, EMPTY_NOTE, UNREADABLE_NOTE):
                await env.fake.wait_for(lambda sent=sent: len(env.fake.messages) > sent)
            else:
                await env.finished(msg_id)
                questions.append(env.llm_server.requests[-1]["messages"][-1]["content"])
            check_outcome(env, log, mark, what, msg_id, expected, questions)


async def test_an_unreadable_message_is_answered_once_even_when_redelivered(make_env: Any) -> None:
    env = await make_env(card_template_id="")
    data = shaped("text is a list", {"text": [1, 2]}, env, "msgUnreadable")
    with captured_log() as log:
        for _ in range(2):
            frame = await env.fake.push_bot_message(data)
            assert (await env.fake.wait_ack(frame))["code"] == 200
            await env.adapter.drain()
        await env.fake.wait_for(lambda: len(env.fake.messages) == 1)
        [line] = [line for line in log.since() if line["event"] == "dingtalk.message_unreadable"]
    assert line["msg_id"] == "msgUnreadable"
    assert [UNREADABLE_NOTE in m.text for m in env.fake.messages] == [True]
    assert env.llm_server.requests == []


async def test_message_shapes_over_the_http_callback(make_env: Any) -> None:
    env = await make_env(card_template_id="", mode="http", http_host="127.0.0.1", http_port=free_port())
    url = env.adapter.callback_server.url
    picks = [s for s in SHAPES if s[0] in {"text as a string", "text is a list", "picture content null", "richText"}]
    questions: list[str] = []
    async with aiohttp.ClientSession() as http:
        for n, (what, fields, expected) in enumerate(picks):
            msg_id = f"msgHttpShape{n}"
            if expected not in (IMAGE_NOTE, EMPTY_NOTE, UNREADABLE_NOTE):
                env.llm_server.enqueue(Script.text(f"回答 {n}"))
            sent = len(env.fake.messages)
            with captured_log() as log:
                stamp = str(int(time.time() * 1000))
                headers = {"timestamp": stamp, "sign": sign(stamp, env.fake.client_secret)}
                async with http.post(url, json=shaped(what, fields, env, msg_id), headers=headers) as response:
                    assert response.status == 200, what
                await env.adapter.drain()
                if expected in (IMAGE_NOTE, EMPTY_NOTE, UNREADABLE_NOTE):
                    await env.fake.wait_for(lambda sent=sent: len(env.fake.messages) > sent)
                else:
                    await env.finished(msg_id)
                    questions.append(env.llm_server.requests[-1]["messages"][-1]["content"])
                check_outcome(env, log, 0, what, msg_id, expected, questions)


@pytest.mark.parametrize("junk", [{}, {"msgId": 5, "conversationId": ["x"]}, {"conversationId": "c", "text": 3.5, "msgtype": []}])
def test_parsing_never_raises(junk: dict[str, Any]) -> None:
    message = parse_bot_message(junk)
    assert isinstance(message.text.text, str) and isinstance(message.msg_id, str)
