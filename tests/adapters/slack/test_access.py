"""The access policy on the fake Slack: Slack Connect users, and senders whose workspace nobody names, are refused
with a note and no model request; /whoami answers."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fakes.slack_env import replies, slack_env
from tools.demo.script import Script


async def test_a_slack_connect_user_is_refused_with_a_note_and_no_model_request(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path):
        event = env.fake.mention("list prod hosts", channel="C1", user="UEXT")
        event["user_team"] = "TOTHERORG"  # Slack Connect: the asker's home workspace is not the installing one
        delivery = await env.push(event)
        assert delivery.submission is not None and delivery.submission.status == "refused"
        await asyncio.wait_for(delivery.submission.done, 10)  # type: ignore[arg-type]
        [note] = replies(env, "C1", event["ts"])
        assert "another organisation" in note.markdown()
        assert env.llm.requests == []


async def test_a_sender_whose_workspace_the_event_does_not_name_is_external_and_refused(tmp_path: Any) -> None:
    # Everyone of the workspace may ask (viewer), people of other organisations may not.
    access = {"default_role": "viewer", "external_users": "deny", "roles": {"viewer": {"tools": ["find_server"]}}}
    async for env in slack_env(tmp_path, access_config=access):
        event = env.fake.mention("list prod hosts", channel="C1", user="U0NOTEAM")
        del event["team"]  # neither user_team nor team: nothing says the sender is one of ours
        assert "user_team" not in event
        delivery = await env.push(event)
        assert delivery.submission is not None and delivery.submission.status == "refused"
        await asyncio.wait_for(delivery.submission.done, 10)  # type: ignore[arg-type]
        [note] = replies(env, "C1", event["ts"])
        assert "another organisation" in note.markdown()
        assert env.llm.request_count == 0
        [record] = await env.store.audit_records()
        assert (record.outcome, record.principal) == ("refused:external", "slack:U0NOTEAM")

        # The same person, in an event that names their workspace (the installing one), is answered.
        env.llm.enqueue(Script.text("web-1 and web-2."))
        named = env.fake.mention("list prod hosts", channel="C1", user="U0NOTEAM")
        assert (await env.done(await env.push(named))).outcome == "done"
        assert env.llm.request_count == 1


async def test_whoami_answers_the_asker_privately_without_a_model_request(tmp_path: Any) -> None:
    async for env in slack_env(tmp_path):
        event = env.fake.mention("/whoami", channel="C1", user="U1")
        delivery = await env.push(event)
        assert delivery.submission is not None and delivery.submission.status == "whoami"
        await asyncio.wait_for(delivery.submission.done, 10)  # type: ignore[arg-type]
        assert replies(env, "C1", event["ts"]) == []  # nothing in the open thread
        [note] = env.fake.ephemerals  # only the asker sees it
        text = note["text"]
        assert note["user"] == "U1" and note["thread_ts"] == event["ts"]
        assert "slack:U1" in text and "viewer" in text and "find_server" in text
        assert env.llm.requests == []
