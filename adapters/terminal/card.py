"""A card as ``rich`` draws it: preamble, status lines, muted thought, Markdown answer, charts, footer.

Model text passes :func:`~botgateway.cards.inert.inert_markup` like on every
platform: a terminal fetches nothing, but a copied answer should not carry a live image or a hidden link either.
A terminal shows no picture: each chart of the turn is a line under the answer,
its title and the shape of its series in block characters (``📈 cpu · 1h
▁▂▄▇█▆``), with its figures in words beneath when they are short.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from botgateway.artifacts import ArtifactView
from botgateway.cards.inert import inert_markup
from botgateway.cards.render import CURSOR, close_open_fence, preamble_text, tool_line_text
from botgateway.snapshot import CardSnapshot, Narration
from botgateway.strings import t

__all__ = ["SHORT_ALT_CHARS", "Tail", "card_renderable", "chart_line"]

SHORT_ALT_CHARS = 160
"""Figures in words up to this long are shown under a chart's line; longer ones are in the answer anyway."""

_BORDER = {
    "queued": "yellow",
    "working": "cyan",
    "streaming": "cyan",
    "done": "green",
    "failed": "red",
    "stopped": "yellow",
}
_TOOL_STYLE = {"running": "cyan", "waiting": "yellow", "done": "green", "failed": "red"}



def card_renderable(snapshot: CardSnapshot, *, title: str = "") -> RenderableType:
    """The card as a rich renderable: the preamble (an alert's status) above a rule, status lines, muted thought,
    Markdown answer, footer."""
    rows = _rows(snapshot)
    preamble = preamble_text(snapshot)
    if preamble:
        rows[:0] = [Markdown(inert_markup(preamble, snapshot.locale)), *([Rule(style="dim")] if rows else [])]
    return Panel(
        Group(*rows),
        title=title or None,
        title_align="left",
        border_style=_BORDER.get(snapshot.status, "white"),
        expand=True,
    )


def _rows(snapshot: CardSnapshot) -> list[RenderableType]:
    """Everything below the preamble."""
    locale = snapshot.locale
    rows: list[RenderableType] = []
    if snapshot.asker and snapshot.part == 1:
        rows.append(Text(t(locale, "asker", asker=snapshot.asker), style="bold"))
    if snapshot.part > 1:
        rows.append(Text(t(locale, "continuation", part=snapshot.part), style="dim"))
    if snapshot.status == "queued":
        note = snapshot.error
        if not note:
            position = snapshot.queue_position
            note = t(locale, "queued_position", position=position) if position else t(locale, "queued")
        rows.append(Text(note, style="yellow"))
    else:
        for block in snapshot.blocks:
            if isinstance(block, Narration):
                if block.text.strip():
                    rows.append(Markdown(inert_markup(close_open_fence(block.text.strip()), locale)))
            else:
                rows.append(Text(tool_line_text(block, locale), style=_TOOL_STYLE.get(block.status, "")))
        if snapshot.thought:
            rows.append(Text("💭 " + " ".join(snapshot.thought.split()), style="dim italic"))
        answer = snapshot.answer
        if snapshot.status == "streaming":
            answer = close_open_fence(answer)
            answer += ("\n" if answer.endswith("```") else "") + CURSOR
        if answer.strip():
            rows.append(Markdown(inert_markup(answer, locale)))
        elif snapshot.status == "working" and not snapshot.thought:
            label = t(locale, "working") if snapshot.blocks else t(locale, "thinking")
            rows.append(Spinner("dots", text=Text(label, style="cyan")))
        rows.extend(chart_line(view, locale) for view in snapshot.artifacts)
        if snapshot.continued:
            rows.append(Text(t(locale, "continued"), style="dim"))
        if snapshot.final and snapshot.error:
            rows.append(Text(snapshot.error, style="red" if snapshot.status == "failed" else "yellow"))
        elif snapshot.status == "stopped":
            rows.append(Text(t(locale, "stopped"), style="yellow"))
    if snapshot.footer:
        rows.append(Text(snapshot.footer, style="dim"))
    return rows


def _printable(text: str) -> str:
    """``text`` on one line, without control characters (a tool's words must not drive the terminal)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def chart_line(view: ArtifactView, locale: str = "en") -> Text:
    """A chart as the terminal shows it: ``📈 <title>  <sparkline>``, its short figures beneath; or why it could not
    be shown."""
    artifact = view.artifact
    title = _printable(artifact.title)
    if view.state == "failed":
        return Text(t(locale, "chart_failed", title=title, reason=_printable(view.error)), style="yellow")
    line = Text.assemble("📈 ", (title, "bold"))
    if spark := _printable(artifact.sparkline):
        line.append("  ")
        line.append(spark, style="cyan")
    alt = _printable(artifact.alt)
    if alt and len(alt) <= SHORT_ALT_CHARS:
        line.append("\n   ")
        line.append(alt, style="dim")
    return line


class Tail:
    """Shows only the last lines of a renderable that would not fit the screen.

    While a long answer streams, the newest text is what matters; the full card
    is printed once it is final.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options.update(height=None), pad=False)
        room = max(5, (options.max_height or console.height) - 1)
        if len(lines) > room:
            lines = lines[-room:]
        for line in lines:
            yield from line
            yield Segment.line()
