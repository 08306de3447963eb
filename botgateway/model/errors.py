"""The model client's failures, in plain words.

Every failure of :class:`~botgateway.model.client.LLMClient` is an :class:`LLMError`
whose message names the config key to check and never contains the API key.
This module also reads what a failed answer tells us: the provider's own
message, its error code, how long it asks us to wait (``Retry-After``), and
whether it refused the request (HTTP 4xx: :class:`LLMRefused`), in particular
as too long for the model's context (:class:`LLMContextTooLong`).
"""

from __future__ import annotations

import email.utils
import time
from urllib.parse import urlsplit

import openai

__all__ = [
    "LLMContextTooLong",
    "LLMError",
    "LLMInterrupted",
    "LLMRefused",
    "LLMUnavailable",
    "describe_failure",
    "endpoint_host",
    "failure_error",
    "is_context_too_long",
    "provider_message",
    "retry_after",
]

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "input is too long",
    "prompt is too long",
    "input length",
)
"""How OpenAI-compatible providers word a request past the model's context (matched case-insensitively)."""

_NOT_REFUSALS = frozenset({401, 403, 404, 408, 409, 429})
"""4xx answers that are about our setup or the service's load, not about this request."""


class LLMError(Exception):
    """The model could not be used; ``message`` is safe to show to the user."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        """Plain words, with the config key to check; no secrets."""
        self.status = status
        """The HTTP status, when the service answered one."""


class LLMUnavailable(LLMError):
    """Nothing streamed: the model could not be reached, refused, or never started answering."""


class LLMRefused(LLMUnavailable):
    """The model service answered, and refused this request (HTTP 4xx); retrying it unchanged would not help."""


class LLMContextTooLong(LLMRefused):
    """The request was refused as longer than the model's context; a shorter history may succeed."""


class LLMInterrupted(LLMError):
    """The stream broke after output had started; the partial output is kept, never retried."""

    def __init__(self, message: str, *, partial_text: str = "", partial_reasoning: str = "", status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.partial_text = partial_text
        """Visible text that streamed before the failure."""
        self.partial_reasoning = partial_reasoning
        """Reasoning that streamed before the failure."""


def provider_message(exc: BaseException, secret: str) -> str:
    """The provider's own error message, on one line, at most 300 characters, with ``secret`` masked."""
    body = getattr(exc, "body", None)
    message = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = str(inner.get("message") or "") if isinstance(inner, dict) else str(inner)
    if not message:
        message = str(getattr(exc, "message", "") or exc)
    if secret and len(secret) >= 4:
        message = message.replace(secret, "***")
    message = " ".join(message.split())
    return message[:300] + ("…" if len(message) > 300 else "") or type(exc).__name__


def describe_failure(exc: BaseException, *, attempts: int, base_url: str, model: str, secret: str) -> str:
    """Plain words for a failure before the first token, naming the config key to check."""
    status = getattr(exc, "status_code", None)
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    host = endpoint_host(base_url)
    if isinstance(exc, openai.APITimeoutError):
        return f"The model service at {host} did not respond in time{tries}; check llm.base_url and the network"
    if isinstance(exc, (openai.APIConnectionError, OSError)):
        return f"Could not reach the model service at {host}{tries}; check llm.base_url and the network"
    if status == 401:
        return "The model service rejected the API key (HTTP 401); check llm.api_key"
    if status == 403:
        return (f"The model service refused access (HTTP 403): {provider_message(exc, secret)}; "
                f"check llm.api_key's permissions for model {model!r}")
    if status == 404:
        return f"The model service does not know model {model!r} or the URL is wrong (HTTP 404); check llm.model and llm.base_url"
    if status == 429:
        if _error_code(exc) in {"insufficient_quota", "quota_exceeded"} or "quota" in provider_message(exc, secret).lower():
            return "The model service account is out of quota (HTTP 429); top up the account or use another llm.api_key"
        return f"The model service is rate limiting requests (HTTP 429){tries}; try again in a minute"
    if status is not None and status >= 500:
        return f"The model service had an internal error (HTTP {status}){tries}; try again shortly"
    if is_context_too_long(exc, secret):
        return (
            f"The model service refused the request as too long for the model (HTTP {status}): "
            f"{provider_message(exc, secret)}. Ask a shorter question, or start a new conversation"
        )
    if status is not None:
        return f"The model service refused the request (HTTP {status}): {provider_message(exc, secret)}"
    return f"The model service reported an error: {provider_message(exc, secret)}"


def is_context_too_long(exc: BaseException, secret: str) -> bool:
    """Whether the provider refused the request as longer than the model's context."""
    status = getattr(exc, "status_code", None)
    if status == 413:  # Payload Too Large, from the service or a proxy before it
        return True
    if status not in (400, 422):
        return False
    said = f"{_error_code(exc) or ''} {provider_message(exc, secret)}".lower()
    return any(phrase in said for phrase in _CONTEXT_PHRASES)


def failure_error(exc: BaseException, *, attempts: int, base_url: str, model: str, secret: str) -> LLMUnavailable:
    """The error for a failure before the first token: a refusal of the request, or the model unavailable."""
    status = getattr(exc, "status_code", None)
    message = describe_failure(exc, attempts=attempts, base_url=base_url, model=model, secret=secret)
    if is_context_too_long(exc, secret):
        return LLMContextTooLong(message, status=status)
    if status is not None and 400 <= status < 500 and status not in _NOT_REFUSALS:
        return LLMRefused(message, status=status)
    return LLMUnavailable(message, status=status)


def retry_after(exc: BaseException) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date), if the answer had one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_code(exc: BaseException) -> str | None:
    """The provider's error code (``insufficient_quota``…), from the exception or its body."""
    code = getattr(exc, "code", None)
    if code:
        return str(code)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("code"):
            return str(inner["code"])
    return None


def endpoint_host(url: str) -> str:
    """``scheme://host:port`` of ``url`` without credentials or path."""
    parts = urlsplit(url)
    if not parts.hostname:
        return "the configured URL"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"
