"""A turn's chart on DingTalk: uploaded once, shown under the AI card or inside the markdown reply.

The real dingtalk-stream client, gateway, tool loop, card streamer and chart
renderer against the fake DingTalk; the scripted model calls ``chart_probe``
(a real chart), then answers quoting its figures. Assertions are on what the
fake recorded: the media upload (its token, its PNG), the image message and its
``photoURL``, the card's and the reply's markdown.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from PIL import Image

from adapters.dingtalk.media import MediaUploads
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.sink import PermanentError, RateLimited
from botgateway.strings import t
from tests.chart_fixtures import CHART_FIGURES, CHART_TITLE, chart_maker, chart_probe_tool, probe_spec
from tests.estate_fixtures import tools_then_answer
from tests.fakes.dingtalk import MEDIA_PATH, Call, FakeDingTalk, SentMessage, UploadedMedia
from tests.fakes.dingtalk_env import GROUP, Env, EnvFactory
from tools.demo.script import ToolCallSpec

LEAD = "prod-db-01 的 CPU 如下。"
"""The first line of the scripted answer; the tool's result (its figures) follows it verbatim."""
CALLS: list[ToolCallSpec] = [("c1", "chart_probe", {})]
IMAGE_SEND = {"group": "/v1.0/robot/groupMessages/send", "oto": "/v1.0/robot/oToMessages/batchSend"}


@asynccontextmanager
async def charting(make_env: EnvFactory, **options: Any) -> AsyncIterator[Env]:
    """A gateway whose model calls ``chart_probe`` and answers with its figures; ``options`` go to the env."""
    async with chart_maker() as maker:
        yield await make_env(tools=[chart_probe_tool(maker)], responder=tools_then_answer(CALLS, LEAD), **options)


async def answered(env: Env, **ask: Any) -> None:
    """Ask about prod-db-01's CPU (``ask``: who and where) and wait until the turn is done."""
    msg_id, _ = await env.ask("prod-db-01 的 CPU 怎么样？", **ask)
    outcome = await env.finished(msg_id)
    assert outcome.outcome == "done", outcome


def the_upload(fake: FakeDingTalk) -> UploadedMedia:
    """The one picture uploaded, after checking it is the chart: a PNG at the artifact's size, sent with a token."""
    [call] = fake.uploads()
    assert call.status == 200 and call.token in fake.tokens_issued
    [media] = fake.media.values()
    spec = probe_spec()
    picture = Image.open(io.BytesIO(media.data))
    assert (picture.format, picture.size) == ("PNG", (spec.width, spec.height))
    assert (media.media_type, media.content_type) == ("image", "image/png") and media.file_name.endswith(".png")
    return media


def index_of(fake: FakeDingTalk, path: str, which: int = 0) -> int:
    """Where the ``which``-th call to ``path`` is among every call the fake received (negative: from the end)."""
    return [i for i, c in enumerate(fake.calls) if c.path == path][which]


def failure_line(title: str) -> str:
    """The start of the card's line for a chart that could not be shown (its reason follows)."""
    return t("zh-CN", "chart_failed", title=title, reason="\0").split("\0")[0]


def image_call(fake: FakeDingTalk, message: SentMessage) -> int:
    """Where the call that sent ``message`` is among the fake's calls."""
    return next(i for i, c in enumerate(fake.calls) if c.body is message.body)


async def test_the_chart_goes_right_under_the_ai_card_as_one_image_message(make_env: EnvFactory) -> None:
    async with charting(make_env) as env:
        await answered(env, staff_id="staff001")
        fake = env.fake
        media = the_upload(fake)
        [card] = env.cards()
        final = card.updates[-1]
        assert final["isFinalize"] and not final["isError"]
        assert LEAD in final["content"] and CHART_FIGURES in final["content"], final["content"]
        assert failure_line(CHART_TITLE) not in final["content"]
        assert fake.media_ids_in(final["content"]) == [], "the AI card embeds no picture: it goes under the card"

        [image] = fake.image_messages()
        assert (image.via, image.chat, image.photo_url) == ("group", GROUP, media.media_id)
        assert [m.msg_key for m in fake.messages] == ["sampleImageMsg"], "the answer itself stays on the card"
        sent = image_call(fake, image)
        assert index_of(fake, "/v1.0/card/instances/createAndDeliver") < sent, "the image follows the card"
        assert index_of(fake, MEDIA_PATH) < sent < index_of(fake, "/v1.0/card/streaming", -1)


async def test_in_a_1to1_chat_the_image_goes_to_the_asker(make_env: EnvFactory) -> None:
    async with charting(make_env) as env:
        await answered(env, staff_id="staff007", group=False, conversation_id="cidDirect007==")
        fake = env.fake
        media = the_upload(fake)
        [card] = fake.cards_in("dtv1.card//IM_ROBOT.staff007")
        assert CHART_FIGURES in card.content
        [image] = fake.image_messages()
        assert (image.via, image.chat, image.photo_url) == ("oto", "staff007", media.media_id)
        assert index_of(fake, "/v1.0/card/instances/createAndDeliver") < image_call(fake, image)


async def test_a_failed_upload_leaves_the_answer_whole_with_a_one_line_note(make_env: EnvFactory) -> None:
    async with charting(make_env) as env:
        env.fake.fail_next(MEDIA_PATH, "500")
        await answered(env, staff_id="staff001")
        fake = env.fake
        [call] = fake.uploads()
        assert call.status == 503 and fake.media == {}
        [card] = env.cards()
        content = card.updates[-1]["content"]
        assert LEAD in content and CHART_FIGURES in content
        [note] = [line for line in content.splitlines() if line.startswith(failure_line(CHART_TITLE))]
        assert "503" in note and "access_token" not in note, note
        assert fake.image_messages() == [] and fake.messages == []


async def test_a_throttled_upload_is_tried_again_from_the_budget(make_env: EnvFactory) -> None:
    async with charting(make_env) as env:
        env.fake.fail_next(MEDIA_PATH, "qps")  # HTTP 403 QpsLimit: a RateLimited the pacer waits out
        await answered(env, staff_id="staff001")
        fake = env.fake
        assert [c.status for c in fake.uploads()] == [403, 200]
        [media] = fake.media.values()
        [image] = fake.image_messages()
        assert image.photo_url == media.media_id
        [card] = env.cards()
        assert failure_line(CHART_TITLE) not in card.updates[-1]["content"]


async def test_a_markdown_reply_embeds_the_uploaded_chart(make_env: EnvFactory) -> None:
    async with charting(make_env, card_template_id="") as env:  # no template: one markdown reply per turn
        await answered(env, staff_id="staff001")
        fake = env.fake
        media = the_upload(fake)
        assert env.cards() == [] and fake.image_messages() == []
        [reply] = fake.messages
        assert reply.via == "webhook" and reply.msg_key == "markdown"
        assert LEAD in reply.text and CHART_FIGURES in reply.text
        assert fake.media_ids_in(reply.text) == [media.media_id]
        assert f"![{CHART_TITLE}]({media.media_id})" in reply.text
        assert reply.text.index(CHART_FIGURES) < reply.text.index(media.media_id), "the chart comes after the answer"
        assert index_of(fake, MEDIA_PATH) < index_of(fake, "/robot/sendBySession"), "uploaded before the reply"


async def test_a_markdown_reply_whose_upload_fails_says_so_in_one_line(make_env: EnvFactory) -> None:
    async with charting(make_env, card_template_id="") as env:
        env.fake.fail_next(MEDIA_PATH, "500")
        await answered(env, staff_id="staff001")
        [reply] = env.fake.messages
        assert CHART_FIGURES in reply.text and env.fake.media_ids_in(reply.text) == []
        assert len([line for line in reply.text.splitlines() if line.startswith(failure_line(CHART_TITLE))]) == 1


# --- the upload itself, against the fake -------------------------------------------------------


@pytest.fixture
async def uploads() -> AsyncIterator[tuple[FakeDingTalk, MediaUploads]]:
    async with FakeDingTalk() as fake:
        api = DingTalkOpenAPI(client_id=fake.client_id, client_secret=fake.client_secret, base_url=fake.base_url)
        yield fake, MediaUploads(api, oapi_base_url=fake.base_url)
        await api.aclose()


def tiny_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), "white").save(out, format="PNG")
    return out.getvalue()


async def test_an_upload_refreshes_a_stale_token_once(uploads: tuple[FakeDingTalk, MediaUploads]) -> None:
    fake, media = uploads
    first = await media.upload_png(tiny_png(), "a.png")
    fake.expire_tokens()  # the old API answers HTTP 200, errcode 40014
    second = await media.upload_png(tiny_png(), "b.png")
    assert list(fake.media) == [first, second] and first != second
    calls: list[Call] = fake.uploads()
    assert [c.status for c in calls] == [200, 200, 200]
    assert calls[1].token == calls[0].token != calls[2].token, "the stale token was refused, a fresh one used"
    assert fake.media[second].data == tiny_png()


async def test_upload_errors_are_typed_and_name_no_secret(uploads: tuple[FakeDingTalk, MediaUploads]) -> None:
    fake, media = uploads
    fake.fail_next(MEDIA_PATH, "429")
    with pytest.raises(RateLimited) as throttled:
        await media.upload_png(tiny_png(), "a.png")
    assert throttled.value.retry_after == 2.0
    with pytest.raises(PermanentError, match="errcode 40005") as refused:
        await media.upload_png(b"GIF89a not a png", "a.png")
    [token] = fake.tokens_issued
    assert token not in str(refused.value) and token not in str(throttled.value)
    assert fake.media == {}
