"""The access policy on the fake DingTalk: a user of another organisation is refused, and no model request is made."""

from __future__ import annotations

from tests.fakes.dingtalk import bot_message
from tests.fakes.dingtalk_env import GROUP
from tools.demo.script import Script


async def test_a_user_of_another_organisation_is_refused_without_a_model_request(make_env) -> None:
    env = await make_env()
    data = bot_message("哪些机器在 prod？", conversation_id=GROUP, staff_id=None, webhook=env.fake.session_webhook(GROUP))
    data["senderCorpId"] = "dingOtherCorp"  # DingTalk names the asker's own organisation here
    frame = await env.fake.push_bot_message(data)
    assert (await env.fake.wait_ack(frame))["code"] == 200
    outcome = await env.finished(data["msgId"])
    assert outcome.outcome == "refused"
    assert outcome.snapshot is not None and "其他组织" in outcome.snapshot.error
    assert env.llm_server.requests == []
    [record] = [r for r in await env.store.audit_records() if r.outcome.startswith("refused")]
    assert record.outcome == "refused:external" and record.platform == "dingtalk"  # refusals are audited

    env.llm_server.enqueue(Script.text("好的"))
    colleague, _ = await env.ask("你好", staff_id="manager42")
    assert (await env.finished(colleague)).outcome == "done"
    assert len(env.llm_server.requests) == 1


async def test_a_sender_of_no_known_organisation_is_external_refused_and_costs_no_model_request(make_env) -> None:
    # Everyone of the organisation may ask (viewer), people of other organisations may not.
    access = {"default_role": "viewer", "external_users": "deny", "roles": {"viewer": {"tools": ["find_host"]}}}
    env = await make_env(access_config=access)
    data = bot_message("哪些机器在 prod？", conversation_id=GROUP, staff_id=None, webhook=env.fake.session_webhook(GROUP))
    del data["senderCorpId"]  # neither senderCorpId nor senderStaffId: whose member the asker is, nobody says
    frame = await env.fake.push_bot_message(data)
    assert (await env.fake.wait_ack(frame))["code"] == 200
    outcome = await env.finished(data["msgId"])
    assert outcome.outcome == "refused"
    assert outcome.snapshot is not None and "其他组织" in outcome.snapshot.error
    assert env.llm_server.request_count == 0
    [record] = [r for r in await env.store.audit_records() if r.outcome.startswith("refused")]
    assert record.outcome == "refused:external" and record.principal == f"dingtalk:{data['senderId']}"

    # A staff id alone does say it: DingTalk sends one only for members of the bot's own organisation.
    env.llm_server.enqueue(Script.text("好的"))
    colleague = bot_message("你好", conversation_id=GROUP, staff_id="manager42", webhook=env.fake.session_webhook(GROUP))
    del colleague["senderCorpId"]
    assert (await env.fake.wait_ack(await env.fake.push_bot_message(colleague)))["code"] == 200
    assert (await env.finished(colleague["msgId"])).outcome == "done"
    assert env.llm_server.request_count == 1
