"""Approvals on the fake DingTalk: the card says what waits and how to decide; approvers reply ``approve 4821``.

The AI card template carries one markdown variable, so the card cannot hold
buttons: the text fallback decides. A non-approver's reply is refused in a
private 1:1 robot message, and the call keeps waiting.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.dingtalk import FakeCard
from tests.fakes.dingtalk_env import Env
from tools.demo.script import Script

ACCESS: dict[str, Any] = {
    "default_role": "viewer",
    "roles": {
        "admin": {"members": ["dingtalk:boss01"], "tools": ["*"], "approve": True},
        "oncall": {"members": ["dingtalk:staff001", "dingtalk:staff002"], "tools": ["*"]},
        "viewer": {"tools": ["find_host"]},
    },
    "approvals": {"tools": ["restart_*"], "timeout_s": 300},
}


def _enqueue_restart(env: Env, answer: str) -> None:
    env.llm_server.enqueue(Script.tool_calls([("c1", "restart_server", json.dumps({"host": "web-1"}))]))
    env.llm_server.enqueue(Script.text(answer))


async def _waiting_code(env: Env) -> str:
    """The code of the approval the group's card asks for, once it shows."""
    await env.fake.wait_for(lambda: any("approve " in c.content for c in env.cards()))
    [card] = env.cards()
    match = re.search(r"approve (\d{4})", card.content)
    assert match is not None, card.content
    return match.group(1)


def _tool_result_sent_to_model(env: Env) -> str:
    [tool_message] = [m for m in env.llm_server.requests[-1]["messages"] if m["role"] == "tool"]
    return str(tool_message["content"])


async def test_an_approver_approves_by_reply_after_a_non_approver_is_refused_privately(make_env) -> None:
    env: Env = await make_env(access_config=ACCESS, approvals=True)
    _enqueue_restart(env, "web-1 已重启。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    code = await _waiting_code(env)
    [card] = env.cards()
    assert "需要审批" in card.content and "restart_server" in card.content and env.restarts == []

    # an oncall colleague who is no approver: a private 1:1 note, the call keeps waiting
    refused, _ = await env.ask(f"approve {code}", staff_id="staff002")
    assert (await env.finished(refused)).outcome == "approval"
    [private] = [m for m in env.fake.messages if m.via == "oto"]
    assert private.chat == "staff002" and "审批人" in private.text
    assert env.restarts == []

    approved, _ = await env.ask(f"批准 {code}", staff_id="boss01", nick="王老板")
    outcome = await env.finished(question)
    assert outcome.outcome == "done" and env.restarts == ["web-1"]
    assert "web-1 restarted" in _tool_result_sent_to_model(env)
    assert "王老板 已批准" in card.content and "需要审批" not in card.content
    [record] = [r for r in await env.store.audit_records() if r.turn_id == outcome.turn_id]
    assert record.tool_calls[0]["approval"] == "approved by dingtalk:boss01"
    await env.finished(approved)


async def test_a_denied_call_never_runs_and_the_model_is_told(make_env) -> None:
    env: Env = await make_env(access_config=ACCESS, approvals=True)
    _enqueue_restart(env, "重启被拒绝了。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    code = await _waiting_code(env)
    denied, _ = await env.ask(f"deny {code}", staff_id="boss01", nick="王老板")
    outcome = await env.finished(question)
    assert outcome.outcome == "done" and env.restarts == []
    assert "denied" in _tool_result_sent_to_model(env)
    [card] = env.cards()
    assert "王老板 已拒绝" in card.content
    await env.finished(denied)


async def test_an_approval_nobody_decides_times_out_as_denied(make_env) -> None:
    access = {**ACCESS, "approvals": {"tools": ["restart_*"], "timeout_s": 0.5}}
    env: Env = await make_env(access_config=access, approvals=True)
    _enqueue_restart(env, "没有人批准重启。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    outcome = await env.finished(question)
    assert outcome.outcome == "done" and env.restarts == []
    assert "no approver decided" in _tool_result_sent_to_model(env)
    [card] = env.cards()
    assert "无人审批" in card.content
    [record] = [r for r in await env.store.audit_records() if r.turn_id == outcome.turn_id]
    assert record.tool_calls[0]["approval"] == "timeout"


async def test_without_a_card_the_approval_is_announced_in_its_own_message(make_env) -> None:
    env: Env = await make_env(access_config=ACCESS, approvals=True, card_template_id="")
    _enqueue_restart(env, "web-1 已重启。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    await env.fake.wait_for(lambda: any("approve " in m.text for m in env.fake.messages))
    [announcement] = [m for m in env.fake.messages if "approve " in m.text]
    match = re.search(r"approve (\d{4})", announcement.text)
    assert match is not None and "restart_server" in announcement.text and env.restarts == []
    approved, _ = await env.ask(f"approve {match.group(1)}", staff_id="boss01", nick="王老板")
    outcome = await env.finished(question)
    assert outcome.outcome == "done" and env.restarts == ["web-1"]
    # the one reply at the end names the approver on the call's line
    assert any("web-1 已重启" in m.text and "王老板 已批准" in m.text for m in env.fake.messages)
    await env.finished(approved)


# --- with an approval card template: buttons through the Stream-mode card callback ----------------

APPROVAL_TEMPLATE = "botgateway-approval.schema"


def _approval_cards(env: Env) -> list[FakeCard]:
    return [c for c in env.cards() if c.create_body["cardTemplateId"] == APPROVAL_TEMPLATE]


async def _press(env: Env, card: FakeCard, user: str, action: str, corp_id: str = "dingcorp") -> None:
    frame = await env.fake.push_card_action(card.out_track_id, user_id=user, action=action,
                                            params={"code": card.params["code"], "token": card.params["token"]},
                                            corp_id=corp_id)
    assert (await env.fake.wait_ack(frame))["code"] == 200


async def test_approval_card_buttons_decide_and_a_non_approvers_press_is_refused_privately(make_env) -> None:
    env: Env = await make_env(access_config=ACCESS, approvals=True, approval_template_id=APPROVAL_TEMPLATE)
    _enqueue_restart(env, "web-1 已重启。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    await env.fake.wait_for(lambda: bool(_approval_cards(env)))
    [card] = _approval_cards(env)
    assert "restart_server" in card.params["prompt"] and card.params["status"] == ""
    assert card.create_body["callbackType"] == "STREAM"

    await _press(env, card, "staff002", "approve")  # oncall, no approver
    await env.fake.wait_for(lambda: any(m.via == "oto" for m in env.fake.messages))
    [private] = [m for m in env.fake.messages if m.via == "oto"]
    assert private.chat == "staff002" and "审批人" in private.text
    # the approver's staff id, but pressed from another organisation: external users are refused
    await _press(env, card, "boss01", "approve", corp_id="dingOtherCorp")
    await env.fake.wait_for(lambda: len([m for m in env.fake.messages if m.via == "oto"]) == 2)
    assert env.restarts == []

    await _press(env, card, "boss01", "approve")
    outcome = await env.finished(question)
    assert outcome.outcome == "done" and env.restarts == ["web-1"]
    await env.fake.wait_for(lambda: card.params["status"] != "")
    assert "已批准" in card.params["status"]
    [record] = [r for r in await env.store.audit_records() if r.turn_id == outcome.turn_id]
    assert record.tool_calls[0]["approval"] == "approved by dingtalk:boss01"


async def test_approval_card_deny_and_timeout_close_the_card(make_env) -> None:
    env: Env = await make_env(access_config=ACCESS, approvals=True, approval_template_id=APPROVAL_TEMPLATE)
    _enqueue_restart(env, "重启被拒绝了。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    await env.fake.wait_for(lambda: bool(_approval_cards(env)))
    [card] = _approval_cards(env)
    await _press(env, card, "boss01", "deny")
    assert (await env.finished(question)).outcome == "done" and env.restarts == []
    await env.fake.wait_for(lambda: card.params["status"] != "")
    assert "已拒绝" in card.params["status"]

    # long enough for the approval card to be out before nobody decides, even on a busy machine
    timeout = {**ACCESS, "approvals": {"tools": ["restart_*"], "timeout_s": 3}}
    env = await make_env(access_config=timeout, approvals=True, approval_template_id=APPROVAL_TEMPLATE, db="t.db")
    _enqueue_restart(env, "没有人批准。")
    question, _ = await env.ask("重启 web-1", staff_id="staff001")
    assert (await env.finished(question)).outcome == "done" and env.restarts == []
    [card] = _approval_cards(env)
    await env.fake.wait_for(lambda: card.params["status"] != "")
    assert "无人审批" in card.params["status"]
