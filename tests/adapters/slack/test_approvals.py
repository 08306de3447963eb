"""Approvals on the fake Slack: a call waits with Approve/Deny buttons, only an approver decides, and the model hears it.

The edit-mode card carries the buttons; a native stream carries them on its
control message. Each test drives the real adapter through Socket Mode button
presses and reads what the card, the model and the audit saw.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from adapters.slack.render import APPROVE_ACTION_ID, DENY_ACTION_ID
from tests.fakes.slack import Message
from tests.fakes.slack_env import Env, controls, replies, slack_env
from tools.demo.script import Script

ACCESS: dict[str, Any] = {
    "default_role": "viewer",
    "roles": {
        "admin": {"members": ["slack:UADMIN"], "tools": ["*"], "approve": True},
        "oncall": {"members": ["slack:U1", "slack:U2"], "tools": ["*"]},
        "viewer": {"tools": ["find_server"]},
    },
    "approvals": {"tools": ["restart_*"], "timeout_s": 300},
}


def _restart_then(answer: str) -> list[Script]:
    return [Script.tool_calls([("c1", "restart_server", json.dumps({"host": "web-1"}))]), Script.text(answer)]


def _approval_buttons(message: Message) -> dict[str, dict[str, Any]]:
    return {b["action_id"]: b for b in message.buttons() if b["action_id"] in (APPROVE_ACTION_ID, DENY_ACTION_ID)}


async def _press(env: Env, message: Message, user: str, action_id: str, value: str, thread_ts: str) -> str:
    """Press a button (its ``value``: ``code:token``) as ``user``; the adapter's verdict (``decided``, ``not_approver``…)."""
    press = env.fake.block_action(user=user, channel="C1", message_ts=message.ts, action_id=action_id, value=value,
                                  thread_ts=thread_ts)
    await env.fake.wait_ack(await env.fake.push(press, type="interactive"))
    delivery = await env.next_delivery()
    assert delivery.event_type == "block_actions"
    return delivery.reason


async def _ask_restart(env: Env, answer: str, *, on: Any = replies) -> tuple[dict[str, Any], Any, Message, str]:
    """U1 asks to restart web-1; returns the event, its delivery, the message with the buttons and their value.

    ``on`` picks the messages to look for the buttons in (``replies``: the card; ``controls``: a stream's control).
    """
    for script in _restart_then(answer):
        env.llm.enqueue(script)
    event = env.fake.mention("restart web-1", channel="C1", user="U1")
    delivery = await env.push(event)
    await env.fake.wait_for(lambda: any(_approval_buttons(m) for m in on(env, "C1", event["ts"])))
    [message] = [m for m in on(env, "C1", event["ts"]) if _approval_buttons(m)]
    return event, delivery, message, _approval_buttons(message)[APPROVE_ACTION_ID]["value"]


def _tool_result_sent_to_model(env: Env) -> str:
    [tool_message] = [m for m in env.llm.requests[-1]["messages"] if m["role"] == "tool"]
    return str(tool_message["content"])


async def _audited_approval(env: Env, turn_id: str) -> str:
    """The approval column of the turn's one audited tool call (the record is written before the turn resolves)."""
    [record] = [r for r in await env.store.audit_records() if r.turn_id == turn_id]
    [call] = record.tool_calls
    return str(call.get("approval", ""))


async def test_an_approver_approves_after_a_non_approver_is_refused(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS, approvals=True):
        event, delivery, card, code = await _ask_restart(env, "web-1 was restarted.")
        assert _approval_buttons(card)[DENY_ACTION_ID]["value"] == code
        typed = code.partition(":")[0]
        assert "Approval needed" in card.markdown() and '{"host": "web-1"}' in card.markdown()
        assert f"approve {typed}" in card.markdown()
        assert env.restarts == [] and len(env.llm.requests) == 1  # nothing runs while it waits

        # an oncall member who is no approver: told privately, the call keeps waiting
        assert await _press(env, card, "U2", APPROVE_ACTION_ID, code, event["ts"]) == "not_approver"
        [note] = env.fake.ephemerals
        assert note["user"] == "U2" and "Only an approver" in note["text"]
        assert env.restarts == [] and not delivery.submission.done.done()  # type: ignore[union-attr]

        assert await _press(env, card, "UADMIN", APPROVE_ACTION_ID, code, event["ts"]) == "decided"
        outcome = await env.done(delivery)
        assert outcome.outcome == "done" and env.restarts == ["web-1"]
        assert "web-1 restarted" in _tool_result_sent_to_model(env)
        assert "approved by" in card.markdown() and _approval_buttons(card) == {}
        assert await _audited_approval(env, outcome.turn_id) == "approved by slack:UADMIN"
        # a late press finds nothing waiting
        assert await _press(env, card, "UADMIN", DENY_ACTION_ID, code, event["ts"]) == "unknown"


async def test_a_denied_call_never_runs_and_the_model_is_told(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS, approvals=True):
        event, delivery, card, code = await _ask_restart(env, "The restart was denied.")
        assert await _press(env, card, "UADMIN", DENY_ACTION_ID, code, event["ts"]) == "decided"
        outcome = await env.done(delivery)
        assert outcome.outcome == "done" and env.restarts == []
        result = _tool_result_sent_to_model(env)
        assert "not run" in result and "denied" in result
        assert "denied by" in card.markdown() and _approval_buttons(card) == {}
        assert (await _audited_approval(env, outcome.turn_id)).startswith("denied by slack:UADMIN")


async def test_an_approval_nobody_decides_times_out_as_denied(tmp_path: Any) -> None:
    access = {**ACCESS, "approvals": {"tools": ["restart_*"], "timeout_s": 0.5}}
    async for env in slack_env(tmp_path, access_config=access, approvals=True):
        for script in _restart_then("Nobody approved the restart."):
            env.llm.enqueue(script)
        event = env.fake.mention("restart web-1", channel="C1", user="U1")
        outcome = await env.done(await env.push(event))
        assert outcome.outcome == "done" and env.restarts == []
        assert "no approver decided within 0.5 s" in _tool_result_sent_to_model(env)
        [card] = replies(env, "C1", event["ts"])
        assert "no decision within" in card.markdown() and _approval_buttons(card) == {}
        assert await _audited_approval(env, outcome.turn_id) == "timeout"


async def test_a_native_stream_carries_the_approval_on_its_control_message(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS, approvals=True, streaming="auto"):
        event, delivery, control, code = await _ask_restart(env, "web-1 was restarted.", on=controls)
        [stream] = [m for m in replies(env, "C1", event["ts"]) if m.stream]
        assert stream.streaming and "restart_server" in str(control.blocks)
        assert await _press(env, control, "UADMIN", APPROVE_ACTION_ID, code, event["ts"]) == "decided"
        outcome = await env.done(delivery)
        assert outcome.outcome == "done" and env.restarts == ["web-1"]
        assert not stream.streaming and "web-1 was restarted." in stream.text
        # the control (and its buttons) went away with the answer
        assert controls(env, "C1", event["ts"]) == []


async def test_typed_approve_in_the_thread_decides_too(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path, access_config=ACCESS, approvals=True):
        event, delivery, _card, value = await _ask_restart(env, "web-1 was restarted.")
        code = value.partition(":")[0]
        # typed in another channel it counts for nothing, even by an approver
        elsewhere = await env.push(env.fake.mention(f"approve {code}", channel="C2", user="UADMIN"))
        assert elsewhere.submission is not None and elsewhere.submission.status == "approval"
        await asyncio.wait_for(elsewhere.submission.done, 10)  # type: ignore[arg-type]
        assert "No approval" in env.fake.ephemerals[-1]["text"] and not delivery.submission.done.done()
        typed = await env.push(env.fake.mention(f"approve {code}", channel="C1", user="UADMIN", thread_ts=event["ts"]))
        assert typed.submission is not None and typed.submission.status == "approval"
        outcome = await env.done(delivery)
        assert outcome.outcome == "done" and env.restarts == ["web-1"]
        await asyncio.wait_for(typed.submission.done, 10)  # type: ignore[arg-type]
