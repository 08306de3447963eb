"""What an adapter wrote to the log, as the JSON lines ``botgateway run`` writes (structlog and stdlib alike)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from botgateway.config import LogConfig
from botgateway.logs import configure_logging

__all__ = ["LogLines", "captured_log"]


class LogLines:
    """The log lines written so far, parsed; :meth:`since` reads only those after a mark."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    def mark(self) -> int:
        """A position to read from later."""
        return len(self._stream.getvalue())

    def since(self, mark: int = 0) -> list[dict[str, Any]]:
        """The lines written after ``mark``."""
        text = self._stream.getvalue()[mark:]
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def problems(self, mark: int = 0) -> list[dict[str, Any]]:
        """Lines at warning level or above written after ``mark``."""
        return [line for line in self.since(mark) if line.get("level") in {"warning", "error", "critical", "exception"}]


@contextmanager
def captured_log() -> Iterator[LogLines]:
    """Route every logger through the production pipeline into memory; the previous set-up comes back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging(LogConfig(format="json", level="info"), stream=stream)
    try:
        yield LogLines(stream)
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)
        structlog.reset_defaults()
