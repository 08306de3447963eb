"""The terminal: a live card rendered with ``rich``, and the interactive ``botgateway chat``.

:class:`TerminalSink` is a :class:`~adapters.base.CardSink` like any chat
platform's: the same :class:`~botgateway.streaming.CardStreamer` and
BufferPolicy decide when it is updated, so what you see here is what a Slack
or DingTalk card would get. :class:`TerminalAdapter` is the prompt loop: one
card per question, Ctrl-C stops the running answer (not the session), Ctrl-C
at the prompt or Ctrl-D quits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import structlog
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.segment import Segment
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from botgateway.budget import RateLimit
from botgateway.cards.render import CURSOR, close_open_fence, tool_line_text
from botgateway.config import TerminalConfig
from botgateway.sink import CardGone, CardHandle, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot, Narration
from botgateway.strings import t
from botgateway.tooling import ToolContext, local_user

if TYPE_CHECKING:
    from botgateway.gateway import Gateway
    from botgateway.memory import Memory

log = structlog.get_logger(__name__)

PLATFORM = "terminal"

_BORDER = {
    "queued": "yellow",
    "working": "cyan",
    "streaming": "cyan",
    "done": "green",
    "failed": "red",
    "stopped": "yellow",
}
_TOOL_STYLE = {"running": "cyan", "done": "green", "failed": "red"}


def card_renderable(snapshot: CardSnapshot, *, title: str = "") -> RenderableType:
    """The card as a rich renderable: status lines, muted thought, Markdown answer, footer."""
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
                    rows.append(Markdown(close_open_fence(block.text.strip())))
            else:
                rows.append(Text(tool_line_text(block, locale), style=_TOOL_STYLE.get(block.status, "")))
        if snapshot.thought:
            rows.append(Text("💭 " + " ".join(snapshot.thought.split()), style="dim italic"))
        answer = snapshot.answer
        if snapshot.status == "streaming":
            answer = close_open_fence(answer)
            answer += ("\n" if answer.endswith("```") else "") + CURSOR
        if answer.strip():
            rows.append(Markdown(answer))
        elif snapshot.status == "working" and not snapshot.thought:
            label = t(locale, "working") if snapshot.blocks else t(locale, "thinking")
            rows.append(Spinner("dots", text=Text(label, style="cyan")))
        if snapshot.continued:
            rows.append(Text(t(locale, "continued"), style="dim"))
        if snapshot.final and snapshot.error:
            rows.append(Text(snapshot.error, style="red" if snapshot.status == "failed" else "yellow"))
        elif snapshot.status == "stopped":
            rows.append(Text(t(locale, "stopped"), style="yellow"))
    if snapshot.footer:
        rows.append(Text(snapshot.footer, style="dim"))
    return Panel(
        Group(*rows),
        title=title or None,
        title_align="left",
        border_style=_BORDER.get(snapshot.status, "white"),
        expand=True,
    )


class _Tail:
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


@dataclass
class _LiveCard:
    """One card on screen."""

    snapshot: CardSnapshot
    """What it shows now."""
    title: str
    """Panel title."""


class TerminalSink:
    """A :class:`~adapters.base.CardSink` that draws cards live in this terminal.

    Several cards may be live at once (queued questions); they share one
    ``rich.live.Live`` area, and each final card is printed above it, so the
    scrollback keeps every answer in full.
    """

    platform = PLATFORM
    max_chars = 60_000
    """A terminal scrolls: continuation parts only for very long answers."""

    def __init__(self, console: Console | None = None, *, rate_per_s: float = 20.0) -> None:
        self.console = console or Console()
        self._limit = RateLimit(rate_per_s=rate_per_s, burst=5)
        self._cards: dict[str, _LiveCard] = {}
        self._live: Live | None = None
        self._ids = itertools.count(1)
        self.updates = 0
        """Updates drawn so far (for tests and the curious)."""

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One generous budget for the whole terminal; the BufferPolicy does the pacing."""
        return f"terminal:{op}", self._limit

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Start drawing a new card."""
        card_id = f"t{next(self._ids)}"
        self._cards[card_id] = _LiveCard(snapshot, title=self._title(target))
        self._redraw()
        return CardHandle(card_id=card_id, target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Redraw the card with ``snapshot``."""
        card = self._cards.get(handle.card_id)
        if card is None:
            raise CardGone(f"terminal card {handle.card_id} is no longer on screen")
        if snapshot.seq >= card.snapshot.seq:
            card.snapshot = snapshot
        self._redraw()
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Print the final card into the scrollback and stop drawing it."""
        card = self._cards.pop(handle.card_id, None)
        if card is None:
            # A card of an earlier process (recovery) or one already final: nothing on screen to fix.
            raise CardGone(f"terminal card {handle.card_id} is not on screen")
        self._print(card_renderable(snapshot, title=card.title))
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Print ``snapshot`` as a new card (notes, refusals, undeliverable finals)."""
        self._print(card_renderable(snapshot, title=self._title(target)))

    def close(self) -> None:
        """Stop the live area (cards still open are left as last drawn)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # drawing

    def _title(self, target: CardTarget) -> str:
        if target.is_group and target.user_name:
            return f"botgateway · {target.user_name}"
        return "botgateway"

    def _area(self) -> RenderableType:
        return _Tail(Group(*(card_renderable(c.snapshot, title=c.title) for c in self._cards.values())))

    def _redraw(self) -> None:
        self.updates += 1
        if not self._cards:
            self.close()
            return
        if self._live is None:
            self._live = Live(self._area(), console=self.console, refresh_per_second=8, transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._live.update(self._area(), refresh=True)

    def _print(self, renderable: RenderableType) -> None:
        if self._live is not None:
            # printed above the live area, which is redrawn below it
            self._live.console.print(renderable)
            if self._cards:
                self._live.update(self._area(), refresh=True)
            else:
                self.close()
        else:
            self.console.print(renderable)
        self.updates += 1


HELP_ROWS = (
    ("/help", "this help"),
    ("/clear", "forget this conversation's history"),
    ("/quit", "leave (or Ctrl-D, or Ctrl-C at the prompt)"),
    ("Ctrl-C while answering", "stop the answer; the question is not kept in history"),
)
"""The chat's commands and keys, as /help lists them."""


class _LineReader:
    """Reads lines from a terminal without a thread, so the event loop stays free.

    The terminal's own line discipline does the editing (backspace, Ctrl-U);
    Ctrl-D on an empty line is end of input.
    """

    def __init__(self, stream: TextIO) -> None:
        self._fd = stream.fileno()
        self._buffer = b""
        self._eof = False

    async def readline(self) -> str | None:
        """The next line without its newline, or None at end of input."""
        loop = asyncio.get_running_loop()
        while b"\n" not in self._buffer and not self._eof:
            ready: asyncio.Future[None] = loop.create_future()
            try:
                loop.add_reader(self._fd, lambda: ready.done() or ready.set_result(None))
            except (PermissionError, OSError, NotImplementedError):
                pass  # a regular file (``chat < questions.txt``): reads never block
            else:
                try:
                    await ready
                finally:
                    loop.remove_reader(self._fd)
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._eof = True
            self._buffer += data
        if b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            return line.decode("utf-8", "replace").rstrip("\r")
        if self._buffer:
            line, self._buffer = self._buffer, b""
            return line.decode("utf-8", "replace")
        return None


class _QuietInput:
    """While a card is live, keystrokes are not echoed over it; leftovers are dropped."""

    def __init__(self, stream: TextIO) -> None:
        self._fd = stream.fileno() if stream.isatty() else None
        self._saved: list[Any] | None = None

    def __enter__(self) -> _QuietInput:
        if self._fd is not None:
            import termios

            with contextlib.suppress(termios.error):
                self._saved = termios.tcgetattr(self._fd)
                quiet = termios.tcgetattr(self._fd)
                quiet[3] &= ~termios.ECHO
                termios.tcsetattr(self._fd, termios.TCSANOW, quiet)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None and self._saved is not None:
            import termios

            with contextlib.suppress(termios.error):
                termios.tcflush(self._fd, termios.TCIFLUSH)
                termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)


class TerminalAdapter:
    """``botgateway chat``: an interactive prompt, one live card per question."""

    name = PLATFORM

    def __init__(
        self,
        config: TerminalConfig,
        *,
        memory: Memory | None = None,
        model_label: str = "",
        console: Console | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        from botgateway.cards.policy import BufferPolicy

        self.config = config
        self.memory = memory
        """Conversation history, for the banner and ``/clear`` (None: no memory here)."""
        self.model_label = model_label
        """Shown in the banner."""
        self.console = console or Console()
        self.sink = TerminalSink(self.console)
        self.policy = BufferPolicy.from_config(config.policy)
        self._stdin = stdin or sys.stdin
        self._task: asyncio.Task[int] | None = None
        self._current: str | None = None
        self._quit = asyncio.Event()
        self._gateway: Gateway | None = None
        self._stopping: set[asyncio.Task[bool]] = set()
        self.user_id = local_user()
        self.ended = asyncio.Event()
        """Set when the chat has ended (the user quit, or :meth:`stop`); ``botgateway run`` then shuts down."""

    @property
    def conversation_id(self) -> str:
        """This terminal user's conversation."""
        from botgateway.messages import conversation_key

        return conversation_key(PLATFORM, self.config.session_scope, workspace=os.uname().nodename, chat="chat", user=self.user_id)

    async def start(self, gateway: Gateway) -> None:
        """Start the chat in the background when stdin is a terminal (else say it is skipped)."""
        if not self._stdin.isatty():
            log.info("terminal.skipped", reason="stdin is not a terminal")
            return
        self._task = asyncio.create_task(self.run_chat(gateway), name="terminal-chat")

    async def stop(self) -> None:
        """End the chat (stopping a running answer)."""
        self._quit.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # stop() itself was cancelled: do not swallow that
            except Exception as exc:
                log.warning("terminal.chat_failed", error=type(exc).__name__)
        self.sink.close()
        self.ended.set()

    async def run_chat(self, gateway: Gateway) -> int:
        """The prompt loop; returns 0 when the user quits."""
        self._gateway = gateway
        loop = asyncio.get_running_loop()
        reader = _LineReader(self._stdin)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        try:
            await self._banner()
            while not self._quit.is_set():
                self.console.print("[bold cyan]you ›[/] ", end="")
                line = await self._read(reader)
                if line is None:
                    self.console.print()
                    break
                if not self._stdin.isatty():
                    self.console.print(line, highlight=False, markup=False)  # piped questions show in the transcript
                text = line.strip()
                if not text:
                    continue
                if text.startswith("/"):
                    if not await self._command(text):
                        break
                    continue
                await self._ask(gateway, text)
            return 0
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGINT)
            self.sink.close()
            self.ended.set()

    async def _read(self, reader: _LineReader) -> str | None:
        """A line, or None when the user quits (Ctrl-D, or Ctrl-C at the prompt)."""
        read = asyncio.ensure_future(reader.readline())
        quit_ = asyncio.ensure_future(self._quit.wait())
        try:
            await asyncio.wait({read, quit_}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            read.cancel()  # else its reader on stdin outlives the chat
            raise
        finally:
            quit_.cancel()
        if read.done():
            return read.result()
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await read
        return None

    def _on_sigint(self) -> None:
        gateway, turn_id = self._gateway, self._current
        if turn_id is not None and gateway is not None:
            self.console.print(" [yellow]stopping…[/]")
            _keep(self._stopping, gateway.stop_turn(turn_id, self.user_id))
        else:
            self._quit.set()

    async def _banner(self) -> None:
        model = f" · model: [bold]{self.model_label}[/]" if self.model_label else ""
        self.console.print(f"[bold]botgateway chat[/]{model}")
        self.console.print("[dim]Ask about a server (e.g. “which server is 10.0.1.100?”). /help for commands, Ctrl-C stops an answer, Ctrl-D quits.[/]")
        if self.memory is not None:
            try:
                earlier = await self.memory.history(self.conversation_id)
            except Exception as exc:  # a history problem must not keep the chat from starting
                log.warning("terminal.history_unavailable", error=type(exc).__name__)
                earlier = []
            asked = sum(1 for m in earlier if m.get("role") == "user")
            if asked:
                self.console.print(f"[dim]Continuing your earlier conversation ({asked} question(s)); /clear starts afresh.[/]")

    async def _command(self, text: str) -> bool:
        """Run a slash command; False means quit."""
        command = text.split()[0].lower()
        if command in ("/quit", "/exit", "/q"):
            return False
        if command in ("/help", "/?"):
            table = Table.grid(padding=(0, 2))
            table.add_column(style="bold cyan", no_wrap=True)
            table.add_column()
            for key, what in HELP_ROWS:
                table.add_row(key, what)
            self.console.print("Ask about your infrastructure, for example: [italic]which server is 10.0.1.100?[/]")
            self.console.print(table)
        elif command == "/clear":
            if self.memory is not None:
                try:
                    await self.memory.clear(self.conversation_id)
                except Exception as exc:  # a store problem must not end the session
                    log.warning("terminal.clear_failed", error=type(exc).__name__)
                    self.console.print("[red]Could not clear the history[/] (the store is unavailable); try again later.")
                else:
                    self.console.print("[green]History cleared.[/] The next question starts a fresh conversation.")
            else:
                self.console.print("[yellow]No memory to clear here.[/]")
        else:
            self.console.print(f"[yellow]Unknown command {command}.[/] Type /help for the list.")
        return True

    async def _ask(self, gateway: Gateway, text: str) -> None:
        from botgateway.messages import InboundMessage

        name = self.user_id
        target = CardTarget(platform=PLATFORM, chat_id="chat", user_id=self.user_id, user_name=name, locale=self.config.locale)
        ctx = ToolContext(user_id=self.user_id, user_name=name, platform=PLATFORM, chat_id="chat")
        msg = InboundMessage(PLATFORM, "", self.conversation_id, text, target, ctx)
        submission = await gateway.submit(msg, self.sink, self.policy)
        if submission.done is None:
            return
        self._current = submission.turn_id or None
        try:
            with _QuietInput(self._stdin):
                await asyncio.shield(submission.done)
        finally:
            self._current = None


def _keep(tasks: set[asyncio.Task[Any]], coro: Coroutine[Any, Any, Any]) -> None:
    """Run ``coro`` from a signal handler; the event loop holds tasks only weakly, so ``tasks`` keeps it alive."""
    task = asyncio.get_running_loop().create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def render_ask(
    gateway: Gateway, config: TerminalConfig, question: str, *, conversation_id: str = "cli", console: Console | None = None
) -> int:
    """``botgateway ask`` (not ``--json``): one turn drawn as the live card; exit status 0 when answered.

    Ctrl-C stops the turn: the card ends as stopped and the status is 130.
    """
    from botgateway.cards.policy import BufferPolicy
    from botgateway.messages import InboundMessage

    sink = TerminalSink(console or Console())
    user = local_user()
    target = CardTarget(platform=PLATFORM, chat_id="ask", user_id=user, user_name=user, locale=config.locale)
    ctx = ToolContext(user_id=user, user_name=user, platform="cli", chat_id="ask")
    msg = InboundMessage(PLATFORM, "", conversation_id, question, target, ctx)
    submission = await gateway.submit(msg, sink, BufferPolicy.from_config(config.policy))
    if submission.done is None:
        return 1
    loop = asyncio.get_running_loop()
    interrupted = False
    stopping: set[asyncio.Task[bool]] = set()

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        _keep(stopping, gateway.stop_turn(submission.turn_id, user))

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        outcome = await asyncio.shield(submission.done)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
        sink.close()
    if interrupted or outcome.outcome == "stopped":
        return 130
    return 0 if outcome.outcome == "done" else 1
