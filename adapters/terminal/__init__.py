"""The terminal: a live card rendered with ``rich``, the interactive ``botgateway chat`` and ``ask``'s card.

:class:`TerminalSink` (:mod:`adapters.terminal.sink`) is a
:class:`~botgateway.sink.CardSink` like any chat platform's: the same
:class:`~botgateway.cards.streamer.CardStreamer` and BufferPolicy decide when
it is updated, so what you see here is what a Slack or DingTalk card would
get. The card's drawing is :mod:`adapters.terminal.card`; the prompt loop is
:class:`TerminalAdapter` (:mod:`adapters.terminal.chat`), reading the keyboard
through :mod:`adapters.terminal.keyboard`; ``botgateway ask`` draws its one
card with :func:`render_ask` (:mod:`adapters.terminal.ask`).
"""

from __future__ import annotations

from adapters.terminal.ask import render_ask
from adapters.terminal.card import card_renderable
from adapters.terminal.chat import HELP_ROWS, TerminalAdapter
from adapters.terminal.sink import PLATFORM, TerminalSink

__all__ = ["HELP_ROWS", "PLATFORM", "TerminalAdapter", "TerminalSink", "card_renderable", "render_ask"]
