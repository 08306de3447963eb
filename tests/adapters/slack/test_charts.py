"""A turn's chart on the fake Slack: one two-step upload per answer, into the answer's thread, never holding it up.

Real slack-bolt / slack-sdk against the fake Slack (which checks the upload the
way Slack does: announced length, bytes at its upload URL, a share of uploaded
files only), the real gateway, tool loop and card streamer, and the chart drawn
by the real renderer. The scripted model calls ``chart_probe`` and answers
quoting its figures. Both streaming modes: an edited message and a native stream.
"""

from __future__ import annotations

import io
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
import yaml
from PIL import Image
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.uploads import upload_place
from botgateway.artifacts import Artifact
from botgateway.sink import CardHandle, CardTarget
from botgateway.tooling import Tool, ToolContext, ToolOutput, tool
from tests.chart_fixtures import CHART_FIGURES, CHART_TITLE, chart_maker, chart_probe_tool
from tests.estate_fixtures import tools_then_answer
from tests.fakes.slack import BOT_TOKEN, FakeSlack, Message
from tests.fakes.slack_env import Env, replies, slack_env
from tests.fakes.slack_files import SharedFile
from tests.paths import REPO

LEAD = "Here are the figures."
"""The first line of the scripted answer; the probe's result (its figures) follows it verbatim."""

MODES = ["edit", "native"]

GET_URL = "files.getUploadURLExternal"
COMPLETE = "files.completeUploadExternal"


def recording_probe(probe: Tool, drawn: list[Artifact]) -> Tool:
    """``chart_probe`` as the model sees it, keeping each chart it returns in ``drawn``."""

    async def chart_probe(*, ctx: ToolContext) -> ToolOutput:
        """Figures of prod-db-01's CPU over the last hour, with a chart."""
        output = await probe.invoke({}, ctx)
        drawn.extend(output.artifacts)
        return output

    return tool(chart_probe, read_only=True)


@pytest.fixture
async def drawn() -> list[Artifact]:
    """The charts the probe drew in a test."""
    return []


@pytest.fixture
async def env(tmp_path: Path, request: pytest.FixtureRequest, drawn: list[Artifact]) -> AsyncIterator[Env]:
    """The fake Slack and a gateway whose model calls ``chart_probe`` and answers; ``streaming`` from the test's
    ``mode`` parameter (edit when it has none)."""
    callspec = getattr(request.node, "callspec", None)
    mode = callspec.params.get("mode", "edit") if callspec is not None else "edit"
    async with chart_maker() as maker:
        probe = recording_probe(chart_probe_tool(maker), drawn)
        envs = cast(AsyncGenerator[Env, None],
                    slack_env(tmp_path, tools=[probe], responder=tools_then_answer([("c1", "chart_probe", {})], LEAD),
                              streaming=mode))
        try:
            yield await anext(envs)
        finally:
            await envs.aclose()


async def ask(env: Env, event: dict[str, Any]) -> Message:
    """Send ``event``, wait for its answer to be final and return the answer's message."""
    outcome = await env.done(await env.push(event))
    assert outcome.outcome == "done", outcome
    thread = event.get("thread_ts") or (event["ts"] if event["type"] == "app_mention" else None)
    [answer] = [m for m in replies(env, event["channel"], thread) if LEAD in m.markdown()]
    assert not answer.streaming
    return answer


def chart_lines(card: str) -> list[str]:
    """The card's lines saying a chart could not be shown."""
    return [line for line in card.splitlines() if "could not be shown" in line]


def assert_is_the_chart(shared: SharedFile, chart: Artifact) -> None:
    """``shared`` is ``chart``: its PNG at its size, titled, with its figures as alt text."""
    assert shared.title == CHART_TITLE and shared.filename == chart.file_name
    assert shared.alt_txt == CHART_FIGURES
    assert shared.data == chart.png
    with Image.open(io.BytesIO(shared.data)) as image:
        assert image.format == "PNG"
        assert image.size == (chart.width, chart.height)
        image.load()  # decodes every pixel: a truncated upload fails here


# --- delivered ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_chart_is_uploaded_once_into_the_mentions_thread_below_the_answer(
        env: Env, drawn: list[Artifact], mode: str) -> None:
    event = env.fake.mention("how is prod-db-01 doing?", channel="C1")
    answer = await ask(env, event)

    assert answer.stream == (mode == "native")
    [chart] = drawn
    [shared] = env.fake.files.shared
    assert (shared.channel, shared.thread_ts) == ("C1", event["ts"])  # the mention's thread, where the answer is
    assert float(shared.ts) > float(answer.ts)  # below the answer
    assert_is_the_chart(shared, chart)
    # Exactly one upload: one URL asked for, one POST of the bytes, one share.
    assert [len(env.fake.calls_of(m)) for m in (GET_URL, COMPLETE)] == [1, 1]
    assert env.fake.files.posts == [(shared.id, 200)]
    [got] = env.fake.calls_of(GET_URL)
    assert got.args["filename"] == chart.file_name and int(got.args["length"]) == len(chart.png)

    card = answer.markdown()
    assert CHART_FIGURES in card  # the figures are on the card, the picture beside it
    assert chart_lines(card) == []


async def test_a_direct_message_answered_at_top_level_gets_its_chart_right_below_it(
        env: Env, drawn: list[Artifact]) -> None:
    event = env.fake.message("how is prod-db-01 doing?", channel="D1", channel_type="im")
    answer = await ask(env, event)

    [shared] = env.fake.files.shared
    assert (shared.channel, shared.thread_ts) == ("D1", None)  # a DM reads flat: not hidden in a thread
    assert float(shared.ts) > float(answer.ts)
    assert_is_the_chart(shared, drawn[0])


async def test_a_throttled_upload_call_waits_for_slacks_retry_after_and_lands_once(
        env: Env, drawn: list[Artifact]) -> None:
    env.fake.fail(COMPLETE, "ratelimited", status=429, retry_after=1)
    event = env.fake.mention("how is prod-db-01 doing?", channel="C1")
    answer = await ask(env, event)

    assert len(env.fake.throttled(COMPLETE)) == 1
    [shared] = env.fake.files.shared
    assert shared.thread_ts == event["ts"]
    assert_is_the_chart(shared, drawn[0])
    assert [len(env.fake.calls_of(m)) for m in (GET_URL, COMPLETE)] == [1, 2]  # the same file, shared on the retry
    assert chart_lines(answer.markdown()) == []


# --- not delivered ------------------------------------------------------------------------------------------------


def _scope_missing(fake: FakeSlack) -> None:
    fake.fail(GET_URL, "missing_scope")


def _upload_url_fails(fake: FakeSlack) -> None:
    fake.files.fail_upload(500)


def _not_in_channel(fake: FakeSlack) -> None:
    fake.fail(COMPLETE, "not_in_channel")


FAILURES = [
    # (how the upload fails, what the card's one line must say)
    (_scope_missing, "slack refused the call (missing_scope): add the files:write scope to the Slack app and "
                     "reinstall it"),
    (_upload_url_fails, "slack's upload service is having trouble (HTTP 500)"),
    (_not_in_channel, "slack refused the call (not_in_channel): invite the bot to the channel (/invite @botgateway)"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("breaks", "reason"), FAILURES, ids=["missing_scope", "upload_url_500", "not_in_channel"])
async def test_a_chart_that_cannot_be_uploaded_leaves_the_answer_whole_and_says_so_in_one_line(
        env: Env, mode: str, breaks: Any, reason: str) -> None:
    breaks(env.fake)
    event = env.fake.mention("how is prod-db-01 doing?", channel="C1")
    answer = await ask(env, event)

    card = answer.markdown()
    assert LEAD in card and CHART_FIGURES in card  # the answer is complete
    assert chart_lines(card) == [f"📈 The chart “{CHART_TITLE}” could not be shown: {reason}."], card
    assert env.fake.files.shared == []
    assert len(env.fake.calls_of(GET_URL)) == 1  # a refusal is not retried: one upload was tried


_CHANNEL_CARD = CardTarget(platform="slack", chat_id="C9", is_group=True, workspace_id="T0001")
"""A card posted at top level of a channel (an alert's): no thread of its own."""


@pytest.mark.parametrize(("handle", "place"), [
    (CardHandle("9.1", _CHANNEL_CARD, {"mode": "edit", "channel": "C9", "ts": "9.1"}), ("C9", "9.1")),
    (CardHandle("deferred-t-1", _CHANNEL_CARD, {"mode": "deferred"}), ("C9", None)),
    (None, ("C9", None)),
], ids=["in-the-cards-thread", "deferred-card-top-level", "no-card-top-level"])
def test_a_channel_cards_chart_goes_into_the_cards_own_thread_once_it_has_a_message(
        handle: CardHandle | None, place: tuple[str, str | None]) -> None:
    assert upload_place(_CHANNEL_CARD, handle) == place


# --- the fake itself -----------------------------------------------------------------------------------------------


async def test_the_fake_takes_the_sdks_own_upload_and_refuses_what_slack_refuses() -> None:
    async with FakeSlack() as fake:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url)
        await client.files_upload_v2(content=b"png bytes", filename="a.png", title="A", channel="C1", thread_ts="1.2")
        [shared] = fake.files.shared
        assert (shared.channel, shared.thread_ts, shared.title, shared.data) == ("C1", "1.2", "A", b"png bytes")

        got = await client.files_getUploadURLExternal(filename="b.png", length=3)
        with pytest.raises(SlackApiError) as refused:  # its bytes never arrived
            await client.files_completeUploadExternal(files=[{"id": got["file_id"]}], channel_id="C1")
        assert refused.value.response["error"] == "file_not_found"
        async with aiohttp.ClientSession() as session:
            async with session.post(str(got["upload_url"]), data=b"four") as wrong:
                assert wrong.status == 400  # not the length announced
            async with session.post(str(got["upload_url"]), data=b"abc") as right:
                assert right.status == 200
        with pytest.raises(SlackApiError) as refused:
            await client.files_getUploadURLExternal(filename="c.png", length=1, alt_txt="x" * 1001)
        assert refused.value.response["error"] == "alt_txt_too_large"


# --- the app -------------------------------------------------------------------------------------------------


def test_the_app_manifest_asks_for_files_write() -> None:
    manifest = yaml.safe_load((REPO / "deploy" / "slack-manifest.yaml").read_text(encoding="utf-8"))
    assert "files:write" in manifest["oauth_config"]["scopes"]["bot"]
