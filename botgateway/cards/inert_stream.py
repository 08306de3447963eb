"""Model text that arrives in pieces, handed on inert as an append-only stream.

An HTTP client that reads an answer as deltas (the OpenAI-compatible API, the
API's event stream) cannot take text back, yet a link or a tag is rewritten
only once it is complete. :class:`InertStream` keeps what it was given, makes
inert all of it but a construct still open at the end
(:func:`~botgateway.cards.inert.stable_cut`), and hands on only what that adds
to what it already handed on; :meth:`InertStream.close` hands on the rest.
Joined, the pieces are the inert rendering of the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import structlog

from botgateway.cards.inert import stable_cut

__all__ = ["InertStream"]

log = structlog.get_logger(__name__)

_MARKUP = re.compile(r"[\[\]()<>&!@`~\\]")
"""Characters that can start, end or change a construct the rules rewrite; text without them renders as itself."""


class InertStream:
    """One growing text (an answer, a thought) and what of its inert rendering was handed on."""

    def __init__(self, rule: Callable[[str], str]) -> None:
        self._rule = rule
        self._raw = ""
        self._taken = 0
        """How much of the raw text the handed-on text renders."""
        self.sent = ""
        """The inert text handed on so far."""

    def push(self, piece: str) -> str:
        """Add ``piece``; return what can be handed on now (empty while a construct at the end is still open)."""
        if self._taken == len(self._raw) and not _MARKUP.search(piece):
            # Nothing held back and nothing to rewrite: the piece is its own rendering (no re-render per token).
            self._raw += piece
            self._taken = len(self._raw)
            self.sent += piece
            return piece
        self._raw += piece
        cut = stable_cut(self._raw)
        return self._advance(self._rule(self._raw[:cut]), cut)

    def close(self) -> str:
        """No more text comes: return the rest."""
        rest = self._advance(self._rule(self._raw), len(self._raw))
        if self._taken == len(self._raw):
            return rest
        # The rule took back text already handed on (it never should): what was sent stays, the rest follows
        # as a paragraph of its own, made inert on its own, so nothing is lost and nothing joins across.
        log.warning("inert_stream.rewrote_sent_text", sent_chars=len(self.sent), raw_chars=len(self._raw))
        tail = "\n\n" + self._rule(self._raw[self._taken :])
        self.sent += tail
        self._taken = len(self._raw)
        return tail

    def _advance(self, shown: str, taken: int) -> str:
        if not shown.startswith(self.sent):
            return ""
        new, self.sent, self._taken = shown[len(self.sent) :], shown, taken
        return new
