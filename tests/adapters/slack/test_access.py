"""The access policy on the fake Slack: Slack Connect users are refused with a note and no model request; /whoami answers."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fakes.slack_env import replies, slack_env


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
