"""``botgateway chat``: the interactive prompt, one live card per question.

Ctrl-C stops the running answer (not the session); Ctrl-C at the prompt or
Ctrl-D quits. The cards are drawn by :class:`~adapters.terminal.sink.TerminalSink`
under the same streamer and BufferPolicy a chat platform's cards get. When the
gateway also serves the web console, the banner says where, and how to log in
(:func:`console_line`): the logs, which say it too, go to a file while the chat
holds the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, TextIO

import structlog
from rich.console import Console
from rich.table import Table

from adapters.terminal.keyboard import LineReader, QuietInput
from adapters.terminal.question import local_question
from adapters.terminal.sink import PLATFORM, TerminalSink
from botgateway.background import BackgroundTasks
from botgateway.config import TerminalConfig
from botgateway.config.web import WebConfig
from botgateway.tooling import local_user

if TYPE_CHECKING:
    from botgateway.gateway import Gateway
    from botgateway.history import Memory

__all__ = ["HELP_ROWS", "TerminalAdapter", "console_line"]

log = structlog.get_logger(__name__)

HELP_ROWS = (
    ("/help", "this help"),
    ("/clear", "forget this conversation's history"),
    ("/quit", "leave (or Ctrl-D, or Ctrl-C at the prompt)"),
    ("Ctrl-C while answering", "stop the answer; the question is not kept in history"),
)
"""The chat's commands and keys, as /help lists them."""

_ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "")
"""Listen addresses that mean every interface: the console is opened on this host's loopback address then."""


def console_line(host: str, port: int, web: WebConfig) -> str:
    """One line saying where the web console is served (the HTTP server's ``host`` and ``port``) and how to log in.

    The login is the admin password (``web.admin_password_hash``) or an API key (``web.api_keys``); with neither,
    the console takes no login, and the line says how to set the password up.
    """
    if host in _ANY_ADDRESS:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    address = f"http://{host}:{port}/"
    if web.admin_password_hash and web.api_keys:
        how = "log in with the admin password (web.admin_password_hash) or an API key (web.api_keys)"
    elif web.admin_password_hash:
        how = "log in with the admin password (web.admin_password_hash)"
    elif web.api_keys:
        how = "log in with an API key (web.api_keys)"
    else:
        how = ("no login is set up: put the hash `botgateway web hash-password` prints in "
               "BOTGATEWAY_ADMIN_PASSWORD_HASH (web.admin_password_hash)")
    return f"Console: {address} — {how}"


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
        console_hint: str = "",
    ) -> None:
        """``console_hint``: the banner's line about the web console (:func:`console_line`), when it is served."""
        from botgateway.cards.buffer_policy import BufferPolicy

        self.config = config
        self.memory = memory
        """Conversation history, for the banner and ``/clear`` (None: no memory here)."""
        self.model_label = model_label
        """Shown in the banner."""
        self.console_hint = console_hint
        """Shown in the banner, under the help line; empty when the console is not served."""
        self.console = console or Console()
        self.sink = TerminalSink(self.console)
        self.policy = BufferPolicy.from_config(config.policy)
        self._stdin = stdin or sys.stdin
        self._task: asyncio.Task[int] | None = None
        self._current: str | None = None
        self._quit = asyncio.Event()
        self._gateway: Gateway | None = None
        self._stopping = BackgroundTasks()
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

    @property
    def connected(self) -> bool:
        """Always: the terminal is right here."""
        return True

    async def stop_receiving(self) -> None:
        """Nothing to close: the chat asks one question at a time, and its answer in progress drains like any other."""

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
        await self._stopping.aclose()
        self.sink.close()
        self.ended.set()

    async def run_chat(self, gateway: Gateway) -> int:
        """The prompt loop; returns 0 when the user quits."""
        self._gateway = gateway
        loop = asyncio.get_running_loop()
        reader = LineReader(self._stdin)
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

    async def _read(self, reader: LineReader) -> str | None:
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
            # A signal handler cannot await; the stop runs as a task the adapter owns.
            self._stopping.spawn(gateway.stop_turn(turn_id, self.user_id), name="terminal-stop")
        else:
            self._quit.set()

    async def _banner(self) -> None:
        model = f" · model: [bold]{self.model_label}[/]" if self.model_label else ""
        self.console.print(f"[bold]botgateway chat[/]{model}")
        self.console.print("[dim]Ask about a server (e.g. “which server is 10.0.1.100?”). "
                           "/help for commands, Ctrl-C stops an answer, Ctrl-D quits.[/]")
        if self.console_hint:
            self.console.print(self.console_hint, highlight=False, markup=False, soft_wrap=True)
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
        msg = local_question(
            text, conversation_id=self.conversation_id, chat_id="chat", user=self.user_id, locale=self.config.locale
        )
        submission = await gateway.submit(msg, self.sink, self.policy)
        if submission.done is None:
            return
        self._current = submission.turn_id or None
        try:
            with QuietInput(self._stdin):
                await asyncio.shield(submission.done)
        finally:
            self._current = None
