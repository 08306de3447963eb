"""A chart in the terminal: no picture, but a line under the answer, ``📈 <title>  <sparkline>``, with its figures
beneath when they are short; a chart that could not be shown says so in one line. The card is the real streamer's,
the chart the real renderer's."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from adapters.terminal import TerminalSink, card_renderable
from botgateway.artifacts import Artifact, ArtifactView
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.events import AnswerDelta, RoundStarted, ToolCallFinished, ToolCallStarted, TurnDone, TurnResult
from botgateway.sink import CardTarget
from botgateway.snapshot import CardSnapshot
from tests.chart_fixtures import CHART_FIGURES, CHART_TITLE, chart_maker, probe_spec

ANSWER = "prod-db-01 is busy but below its alert line."


async def test_the_final_card_shows_each_chart_as_its_title_and_sparkline_under_the_answer() -> None:
    out = io.StringIO()
    sink = TerminalSink(Console(file=out, width=120, force_terminal=False, color_system=None))
    async with chart_maker() as maker:
        chart = await maker.artifact(probe_spec(), alt=CHART_FIGURES, platform="terminal")
    assert chart.sparkline and not chart.dark_png
    state = CardState()
    streamer = CardStreamer(sink, CardTarget(platform="terminal", chat_id="chat", turn_id="t1"),
                            policy=BufferPolicy.from_config(), budget=RateBudget(), state=state,
                            timing=StreamerTiming(final_deadline_s=5))
    await streamer.start()
    await streamer.feed(RoundStarted(round=1, max_rounds=4))
    await streamer.feed(ToolCallStarted(call_id="c1", name="chart_probe", arguments={}))
    await streamer.feed(ToolCallFinished(call_id="c1", name="chart_probe", ok=True, summary="1 series over 1h",
                                         duration_s=0.1, artifacts=(chart,)))
    await streamer.feed(AnswerDelta(text=ANSWER))
    await streamer.feed(TurnDone(result=TurnResult(answer=ANSWER, rounds=2)))
    assert (await streamer.finish()).delivered

    final = out.getvalue().split("╭")[-1]  # the final card, printed into the scrollback
    lines = [line.strip("│ ") for line in final.splitlines()]
    chart_row = next(i for i, line in enumerate(lines) if line.startswith("📈"))
    assert lines[chart_row] == f"📈 {CHART_TITLE}  {chart.sparkline}"
    assert lines[chart_row + 1] == CHART_FIGURES  # its figures, short enough to show
    assert next(i for i, line in enumerate(lines) if ANSWER in line) < chart_row  # under the answer
    assert set(chart.sparkline) <= set("▁▂▃▄▅▆▇█") and len(set(chart.sparkline)) > 3  # a shape, not a flat line


def test_long_figures_are_left_to_the_answer_and_a_failed_chart_says_why() -> None:
    console = Console(file=io.StringIO(), width=120, force_terminal=False, color_system=None)
    chart = Artifact(ref="chart-0a1b2c3d4e5f6071", title=CHART_TITLE, png=b"png", width=800, height=400,
                     alt="figures " * 40, sparkline="▁▂▃▅▇")
    failed = ArtifactView(artifact=replace(chart, ref="chart-ffff"), state="failed",
                          error="the renderer is\x1b[31m down")
    with console.capture() as capture:
        console.print(card_renderable(CardSnapshot(status="done", answer="ok",
                                                   artifacts=(ArtifactView(artifact=chart), failed))))
    text = capture.get()
    assert f"📈 {CHART_TITLE}  ▁▂▃▅▇" in text and "figures figures" not in text
    # The tool's words cannot drive the terminal: the escape is gone, the rest of the line stays.
    assert f"The chart “{CHART_TITLE}” could not be shown: the renderer is [31m down." in text
    assert "\x1b" not in text
