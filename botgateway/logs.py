"""Logging: structlog everywhere, one pipeline, secrets masked.

:func:`configure_logging` routes both structlog events and the standard
library's records (slack_bolt, slack_sdk, dingtalk_stream, aiohttp, openai…)
through the same small processors: context variables, logger name, level, UTC
timestamp, exception text, then :class:`~botgateway.redaction.RedactSecrets`,
then a renderer (JSON lines in production, a readable console for people).

Each turn binds its context once with :func:`bind_turn`; every event logged
inside, in any module, carries ``conversation``, ``user``, ``platform``,
``turn_id`` and ``round``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import structlog
from structlog.typing import Processor

from botgateway.config import ConfigError, LogConfig
from botgateway.redaction import MASK, RedactSecrets, redact_text, secret_values

__all__ = ["MASK", "RedactSecrets", "bind_turn", "configure_logging", "redact_text", "secret_values"]


@contextmanager
def bind_turn(**fields: Any) -> Iterator[None]:
    """Bind turn context to every log event inside the block (``None`` values are skipped).

    Use the usual keys: ``conversation``, ``user``, ``platform``, ``turn_id``,
    ``round``. Blocks nest (``with bind_turn(round=2):`` inside the turn's block)
    and the previous values come back on exit. Tasks created inside inherit them.
    """
    values = {key: value for key, value in fields.items() if value is not None}
    with structlog.contextvars.bound_contextvars(**values):
        yield


_HANDLER_MARK = "_botgateway_handler"
"""Set on the handlers we install; its value says whether we opened the stream (and must close it)."""


def _open_log_file(file: str) -> TextIO:
    """Open ``log.file`` for appending, creating its folder; a path we cannot write is a config problem."""
    path = Path(file).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a", encoding="utf-8", buffering=1)  # closed by the handler that owns it
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise ConfigError([f"log.file: cannot write the log file {str(path)!r} ({reason}); set log.file to a writable path"]) from None


# Transport libraries that log every frame or header block at DEBUG; they stay at INFO.
_CHATTY_LOGGERS = ("httpcore", "hpack", "websockets", "urllib3", "asyncio")


def configure_logging(config: LogConfig, *, stream: TextIO | None = None, secrets: Iterable[str] = ()) -> None:
    """Set up structlog and the standard library's logging to write through one pipeline.

    Args:
        config: Level, format (``json``, ``console``, ``auto`` = console on a terminal) and optional file.
        stream: Where to write; defaults to ``config.file`` (appended) or stderr.
        secrets: Exact values to mask wherever they appear (see :func:`secret_values`).

    Calling it again replaces the previous set-up (tests, ``reload``). Raises
    :class:`~botgateway.config.ConfigError` when ``config.file`` cannot be written.
    """
    owned = False
    if stream is None:
        if config.file:
            stream = _open_log_file(config.file)
            owned = True
        else:
            stream = sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    fmt = config.format
    if fmt == "auto":
        fmt = "console" if is_tty else "json"

    shared = _shared_processors(secrets)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(fmt, is_tty)],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, owned)
    _install(handler, getattr(logging, config.level.upper()))


def _shared_processors(secrets: Iterable[str]) -> list[Processor]:
    """The processors both structlog events and standard-library records go through, redaction last."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        # Tracebacks become text BEFORE redaction: exception messages carry URLs and tokens too.
        structlog.processors.format_exc_info,
        RedactSecrets(secrets),
    ]


def _renderer(fmt: str, is_tty: bool) -> Processor:
    """JSON lines, or the readable console (coloured on a terminal unless ``NO_COLOR`` is set)."""
    if fmt == "json":
        return structlog.processors.JSONRenderer(ensure_ascii=False)
    return structlog.dev.ConsoleRenderer(colors=is_tty and "NO_COLOR" not in os.environ)


def _install(handler: logging.Handler, level: int) -> None:
    """Put ``handler`` on the root logger in place of ours from an earlier call (closing a file we opened)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if hasattr(old, _HANDLER_MARK):
            root.removeHandler(old)
            if getattr(old, _HANDLER_MARK):
                old.close()
    root.addHandler(handler)
    root.setLevel(level)
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.INFO))
    logging.captureWarnings(True)
