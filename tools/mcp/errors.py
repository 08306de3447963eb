"""What went wrong with an MCP server, in words the model and the operator can read, free of secrets."""

from __future__ import annotations

from botgateway.config import McpServerConfig
from botgateway.logs import redact_text
from botgateway.tooling import ToolError

__all__ = ["McpUnavailable", "describe", "leaf", "scrub"]

MAX_REASON = 300
"""Longest reason kept; a server's stack trace must not flood the model's context."""


class McpUnavailable(ToolError):
    """The server cannot be reached right now."""


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups (the SDK raises them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException, config: McpServerConfig) -> str:
    """A short reason for ``exc`` ("command not found: …", "… (code -32000)"), scrubbed."""
    exc = leaf(exc)
    code = getattr(exc, "code", None)
    message = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and "No such file" in message):
        return f"command not found: {config.command}"
    if code is not None and isinstance(code, int):
        text = f"{message} (code {code})"
    elif type(exc).__name__ not in message:
        text = f"{type(exc).__name__}: {message}"
    else:
        text = message
    return scrub(text, config)


def scrub(text: str, config: McpServerConfig) -> str:
    """``text`` without header or env secrets and URL query strings, on one line, cut to :data:`MAX_REASON`."""
    secrets = [v.get_secret_value() for v in config.headers.values()]
    # Env holds flags and paths as well as tokens; masking very short values would only mangle the text.
    secrets += [v.get_secret_value() for v in config.env.values() if len(v.get_secret_value()) >= 6]
    text = redact_text(text, sorted(secrets, key=len, reverse=True))  # a secret inside a longer one: longest first
    if config.url and "?" in config.url:
        text = text.replace(config.url, config.url.split("?", 1)[0] + "?…")
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
