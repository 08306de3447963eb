"""A turn's pictures through the card streamer: each handed to the sink once, after the card exists, and what the
sink placed (or why it failed) shown on the final card; a slow delivery never holds the answer past its bound."""

from __future__ import annotations

import asyncio

from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.render import render_markdown
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.events import (
    AnswerDelta,
    RoundStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnResult,
    event_to_dict,
)
from botgateway.sink import ArtifactSink, CardHandle, CardTarget, PermanentError
from tests.fakes.gateway import RecordingSink

TARGET = CardTarget(platform="test", chat_id="chat-1", turn_id="t1", user_id="u1")


def picture(ref: str = "chart-1", title: str = "CPU of prod-db-01") -> Artifact:
    return Artifact(ref=ref, title=title, png=b"\x89PNG fake", width=800, height=400, alt="cpu last 62 %",
                    sparkline="▁▃▅▇")


class PictureSink(RecordingSink):
    """A recording sink that also takes pictures: embeds them, fails them, or holds them until released."""

    def __init__(self, *, embed: str = "", error: Exception | None = None, hold: bool = False) -> None:
        super().__init__()
        self.shipped: list[tuple[str, str | None, int]] = []  # (ref, card id, calls made before it)
        self.embed = embed
        self.error = error
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        self.shipped.append((artifact.ref, handle.card_id if handle else None, len(self.calls)))
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return ArtifactPlacement(embed=self.embed.format(ref=artifact.ref))


def card(sink: RecordingSink, *, settle_s: float = 5.0) -> CardStreamer:
    return CardStreamer(sink, TARGET, policy=BufferPolicy.from_config(), budget=RateBudget(),
                        state=CardState(footer=False), timing=StreamerTiming(picture_settle_s=settle_s))


async def run_turn(streamer: CardStreamer, *pictures: Artifact) -> None:
    await streamer.start()
    await streamer.feed(RoundStarted(round=1, max_rounds=3))
    await streamer.feed(ToolCallStarted(call_id="c1", name="resource_metrics", arguments={"resource": "prod-db-01"}))
    await streamer.feed(ToolCallFinished(call_id="c1", name="resource_metrics", ok=True, summary="2 series",
                                         duration_s=0.2, artifacts=pictures))
    await streamer.feed(RoundStarted(round=2, max_rounds=3))
    await streamer.feed(AnswerDelta(text="CPU is 62 % now, p95 71 %."))
    await streamer.feed(TurnDone(result=TurnResult(answer="CPU is 62 % now, p95 71 %.")))
    await streamer.finish()


def final_of(sink: RecordingSink) -> str:
    finals = [c for c in sink.calls if c.op == "finalize"]
    assert len(finals) == 1, [c.op for c in sink.calls]
    return render_markdown(finals[0].snapshot, embeds=True)


async def test_each_picture_is_shipped_once_after_the_card_exists_and_its_embed_is_on_the_final_card() -> None:
    sink = PictureSink(embed="![chart](@media-{ref})")
    assert isinstance(sink, ArtifactSink)
    await run_turn(card(sink), picture("chart-1"), picture("chart-1"), picture("chart-2", "Memory"))
    assert [(ref, card_id) for ref, card_id, _ in sink.shipped] == [("chart-1", "card-1"), ("chart-2", "card-1")]
    assert all(before >= 1 for _, _, before in sink.shipped)  # the card was created first
    text = final_of(sink)
    assert "![chart](@media-chart-1)" in text and "![chart](@media-chart-2)" in text
    assert text.index("p95 71 %") < text.index("@media-chart-1")  # below the answer


async def test_a_picture_that_cannot_be_delivered_leaves_the_answer_whole_and_one_line_saying_so() -> None:
    sink = PictureSink(error=PermanentError("the app lacks files:write"))
    await run_turn(card(sink), picture())
    text = final_of(sink)
    assert "CPU is 62 % now, p95 71 %." in text
    assert "The chart “CPU of prod-db-01” could not be shown: the app lacks files:write." in text


async def test_a_delivery_still_running_is_given_up_at_its_bound_and_the_final_says_so() -> None:
    sink = PictureSink(hold=True)  # the upload never finishes
    await asyncio.wait_for(run_turn(card(sink, settle_s=0.05), picture()), 30)
    text = final_of(sink)
    assert "CPU is 62 % now" in text and "its upload did not finish in time" in text


async def test_a_sink_without_pictures_draws_them_itself_and_the_model_text_never_embeds_one() -> None:
    sink = RecordingSink()
    state = CardState(footer=False)
    streamer = CardStreamer(sink, TARGET, policy=BufferPolicy.from_config(), budget=RateBudget(), state=state)
    await run_turn(streamer, picture())
    final = next(c for c in sink.calls if c.op == "finalize").snapshot
    assert [v.state for v in final.artifacts] == ["shown"] and final.artifacts[0].embed == ""
    assert "could not be shown" not in render_markdown(final, embeds=True)


def test_events_describe_pictures_without_their_pixels() -> None:
    event = ToolCallFinished(call_id="c1", name="t", ok=True, summary="", duration_s=0.1, artifacts=(picture(),))
    described = event_to_dict(event)["artifacts"]
    assert described == [{"ref": "chart-1", "title": "CPU of prod-db-01", "width": 800, "height": 400,
                           "alt": "cpu last 62 %", "sparkline": "▁▃▅▇", "bytes": 9}]
