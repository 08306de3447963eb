"""``botgateway ask`` without ``--json``: one question drawn as the live card."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

from rich.console import Console

from adapters.terminal.question import local_question
from adapters.terminal.sink import TerminalSink
from botgateway.background import BackgroundTasks
from botgateway.config import TerminalConfig
from botgateway.tooling import local_user

if TYPE_CHECKING:
    from botgateway.gateway import Gateway

__all__ = ["render_ask"]


async def render_ask(
    gateway: Gateway, config: TerminalConfig, question: str, *, conversation_id: str = "cli", console: Console | None = None
) -> int:
    """``botgateway ask`` (not ``--json``): one turn drawn as the live card; exit status 0 when answered.

    Ctrl-C stops the turn: the card ends as stopped and the status is 130.
    """
    from botgateway.cards.buffer_policy import BufferPolicy

    sink = TerminalSink(console or Console())
    user = local_user()
    msg = local_question(
        question, conversation_id=conversation_id, chat_id="ask", user=user, locale=config.locale, tool_platform="cli"
    )
    submission = await gateway.submit(msg, sink, BufferPolicy.from_config(config.policy))
    if submission.done is None:
        return 1
    loop = asyncio.get_running_loop()
    interrupted = False
    stopping = BackgroundTasks()

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        # A signal handler cannot await; the stop runs as a task this call owns.
        stopping.spawn(gateway.stop_turn(submission.turn_id, user), name="ask-stop")

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        outcome = await asyncio.shield(submission.done)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
        await stopping.aclose()
        sink.close()
    if interrupted or outcome.outcome == "stopped":
        return 130
    return 0 if outcome.outcome == "done" else 1
