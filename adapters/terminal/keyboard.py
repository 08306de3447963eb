"""The keyboard side of the chat: lines read without a thread, and no echo over a live card."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any, TextIO

__all__ = ["LineReader", "QuietInput"]


def _wake(ready: asyncio.Future[None]) -> None:
    """Resolve ``ready`` once: the reader callback may run again before it is removed."""
    if not ready.done():
        ready.set_result(None)


class LineReader:
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
                loop.add_reader(self._fd, _wake, ready)
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


class QuietInput:
    """While a card is live, keystrokes are not echoed over it; leftovers are dropped."""

    def __init__(self, stream: TextIO) -> None:
        self._fd = stream.fileno() if stream.isatty() else None
        self._saved: list[Any] | None = None

    def __enter__(self) -> QuietInput:
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
