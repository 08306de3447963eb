"""Unexpected failures told twice: plain words and an error id for the chat, the full detail for the log.

An exception's text is for whoever runs the bot: it may name hosts, ports,
files, even a password a driver put in its message. The asker, and the model
that reads tool results, get a short reason and an id instead; the log line
that carries the same id holds the exception, its traceback and the context,
with secrets masked (:mod:`botgateway.redaction`, and again by the log
pipeline). Quoting the id is how a user's report finds the log line.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from botgateway.redaction import redact_text

__all__ = ["Incident", "IncidentLog", "new_error_id", "report_incident"]


class IncidentLog(Protocol):
    """The part of a structlog logger :func:`report_incident` writes to."""

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        """Log ``event`` at error level."""
        ...


@dataclass(frozen=True)
class Incident:
    """One unexpected failure, as it may be told outside the log."""

    id: str
    """Short random id, quoted to the asker and logged as ``error_id`` with the detail."""
    reason: str
    """The plain reason followed by the id ("the tool failed unexpectedly (error id 3f9c2a71)"); no exception text."""


def new_error_id() -> str:
    """A fresh error id: 8 hex digits, short enough to read out, random enough not to repeat in a log's lifetime."""
    return secrets.token_hex(4)


def report_incident(log: IncidentLog, event: str, exc: BaseException, *, reason: str, **context: Any) -> Incident:
    """Log ``exc`` in full under a new error id; return what the asker and the model may be told.

    Args:
        log: The logger of the module where it happened.
        event: The log event name (``tool.crashed``).
        exc: The unexpected exception; its traceback goes to the log.
        reason: Plain words for the asker, without any detail of ``exc`` ("the tool failed unexpectedly").
        context: More fields for the log line (the tool's name, the conversation…).
    """
    error_id = new_error_id()
    # Masked here as well as in the pipeline, so the detail is safe in whatever the logger is configured to do.
    detail = redact_text(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    log.error(event, error_id=error_id, error=type(exc).__name__, detail=detail, exc_info=exc, **context)
    return Incident(id=error_id, reason=f"{reason} (error id {error_id})")
