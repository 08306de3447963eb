"""The model client: streamed chat completions from any OpenAI-compatible endpoint.

:class:`LLMClient` wraps ``openai.AsyncOpenAI`` with the SDK's own retries off,
because only we know when a retry is safe: connection errors, HTTP 408/409/429
and 5xx that happen *before the first token* are retried with bounded
exponential backoff honouring ``Retry-After``; once text has streamed, a
failure raises :class:`LLMInterrupted` carrying the partial text and is never
retried (a retry would repeat the text on the user's card). Usage is asked for
with ``stream_options``; an endpoint that rejects that option is asked again
without it (and never again), since usage is optional and the answer is not.

Every failure is an :class:`LLMError` whose message is plain words, names the
config key to check, and never contains the API key.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any, Protocol
from urllib.parse import urlsplit

import openai
import structlog

from botgateway.assembly import AssembledRound, StreamAssembler, StreamPart
from botgateway.config import LLMConfig

__all__ = [
    "ChatModel",
    "LLMClient",
    "LLMError",
    "LLMInterrupted",
    "LLMUnavailable",
    "RoundItem",
]

log = structlog.get_logger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})
"""Statuses worth another try before the first token (overload, rate limit, gateway trouble)."""

RoundItem = StreamPart | AssembledRound
"""What :meth:`LLMClient.stream` yields: parts as they arrive, then the assembled round last."""


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


class LLMInterrupted(LLMError):
    """The stream broke after output had started; the partial output is kept, never retried."""

    def __init__(self, message: str, *, partial_text: str = "", partial_reasoning: str = "", status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.partial_text = partial_text
        """Visible text that streamed before the failure."""
        self.partial_reasoning = partial_reasoning
        """Reasoning that streamed before the failure."""


class ChatModel(Protocol):
    """What the tool loop needs from a model client."""

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncIterator[RoundItem]:
        """Stream one completion: parts as they arrive, then the :class:`AssembledRound`."""
        ...


class LLMClient:
    """Streaming chat completions with safe retries, timeouts and plain-words errors.

    Args:
        config: The ``llm`` section.
        base_url: Overrides the configured endpoint (the demo model, tests).
        http_client: An HTTP client for the SDK (``openai.DefaultAsyncHttpxClient(...)``), to tune
            connection limits or proxies; the SDK's default when ``None``.
        backoff_base_s: First retry wait without ``Retry-After``; doubles per attempt (with jitter).
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        base_url: str | None = None,
        http_client: Any = None,
        backoff_base_s: float = 0.5,
    ) -> None:
        resolved = base_url or config.resolved_base_url
        if not resolved:
            raise LLMError("No model endpoint is configured; set llm.base_url or llm.provider")
        self.config = config
        self.base_url = resolved
        """The endpoint actually used."""
        self.model = config.resolved_model or "default"
        """The model name sent with each request."""
        self._secret = config.api_key.get_secret_value()
        self._ask_usage = True  # cleared for good when the endpoint rejects stream_options
        self._backoff_base_s = backoff_base_s
        self._client = openai.AsyncOpenAI(
            # Keyless endpoints (Ollama, vLLM, the demo) still get a placeholder: the SDK insists on one.
            api_key=self._secret or "no-key",
            base_url=resolved,
            max_retries=0,
            # Our own first-token and idle timeouts govern reads; these are backstops.
            timeout=openai.Timeout(
                max(config.first_token_timeout_s, config.idle_timeout_s) + 5,
                connect=config.connect_timeout_s,
            ),
            http_client=http_client,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    # --- streaming -------------------------------------------------------------

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncIterator[RoundItem]:
        """Stream one completion: :class:`TextPart`/``ReasoningPart``/``ToolCallFragment`` as they arrive, then the :class:`AssembledRound`.

        Raises :class:`LLMUnavailable` when nothing streamed (after retries) and
        :class:`LLMInterrupted` when the stream broke after the first token.
        """
        request = self._request(messages, tools, tool_choice)
        attempt = 0
        while True:
            assembler = StreamAssembler(round)
            sdk_stream: Any = None
            first: list[StreamPart] = []
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.config.first_token_timeout_s):
                    sdk_stream = await self._client.chat.completions.create(**request)
                    while not first:
                        first = assembler.feed(await anext(sdk_stream))
            except StopAsyncIteration:
                pass  # the stream ended before any text: an empty round, still a valid answer
            except TimeoutError:
                await _close(sdk_stream)
                raise LLMUnavailable(
                    f"The model did not start answering within {self.config.first_token_timeout_s:g} s "
                    "(llm.first_token_timeout_s); it may be overloaded, try again shortly"
                ) from None
            except (openai.APIError, OSError) as exc:
                await _close(sdk_stream)
                status = getattr(exc, "status_code", None)
                if status in (400, 422) and "stream_options" in request and "stream_options" in self._provider_message(exc):
                    # An OpenAI-compatible server that does not know stream_options: usage is optional, the answer is not.
                    log.warning("llm_stream_options_rejected", status=status)
                    self._ask_usage = False
                    request.pop("stream_options")
                    continue
                retryable = isinstance(exc, (openai.APIConnectionError, OSError)) or status in RETRYABLE_STATUS
                if retryable and attempt < self.config.max_retries:
                    wait = self._backoff(attempt, exc)
                    attempt += 1
                    log.warning(
                        "llm_retry",
                        attempt=attempt,
                        max_retries=self.config.max_retries,
                        status=status,
                        error=type(exc).__name__,
                        wait_s=round_s(wait),
                    )
                    await asyncio.sleep(wait)
                    continue
                message = self._describe(exc, attempts=attempt + 1)
                log.warning("llm_unavailable", status=status, error=type(exc).__name__, attempts=attempt + 1)
                raise LLMUnavailable(message, status=status) from None
            except ValueError as exc:
                # The SDK could not parse a chunk: a proxy or server that only looks OpenAI-compatible.
                await _close(sdk_stream)
                log.warning("llm_malformed_stream", error=type(exc).__name__)
                raise LLMUnavailable(
                    f"The model service at {_host(self.base_url)} sent a stream that is not valid "
                    "OpenAI-compatible JSON; check that llm.base_url is the service's OpenAI-compatible …/v1 URL"
                ) from None
            except BaseException:
                # Stopped (user stop, shutdown) while the model was still thinking: hang up now, so the
                # provider stops generating (and billing) and the pooled connection is not left streaming.
                await _close(sdk_stream)
                raise
            break

        log.debug("llm_first_token", round=round, wait_s=round_s(time.monotonic() - started), attempts=attempt + 1)
        try:
            for part in first:
                yield part
            if sdk_stream is not None and first:
                while True:
                    try:
                        async with asyncio.timeout(self.config.idle_timeout_s):
                            chunk = await anext(sdk_stream)
                    except StopAsyncIteration:
                        break
                    for part in assembler.feed(chunk):
                        yield part
        except TimeoutError:
            raise LLMInterrupted(
                f"The model stopped sending for {self.config.idle_timeout_s:g} s mid-answer "
                "(llm.idle_timeout_s); the partial answer is kept",
                partial_text=assembler.text,
                partial_reasoning=assembler.reasoning,
            ) from None
        except (openai.APIError, OSError) as exc:
            status = getattr(exc, "status_code", None)
            log.warning("llm_interrupted", status=status, error=type(exc).__name__, chunks=assembler.chunks)
            if isinstance(exc, (openai.APIConnectionError, OSError)):
                message = "The connection to the model broke mid-answer; the partial answer is kept. Ask again to retry"
            else:
                message = f"The model service stopped the answer with an error: {self._provider_message(exc)}"
            raise LLMInterrupted(
                message, partial_text=assembler.text, partial_reasoning=assembler.reasoning, status=status
            ) from None
        except ValueError as exc:
            log.warning("llm_malformed_stream", error=type(exc).__name__, chunks=assembler.chunks)
            raise LLMInterrupted(
                "The model service sent a malformed chunk mid-answer; the partial answer is kept. Ask again to retry",
                partial_text=assembler.text,
                partial_reasoning=assembler.reasoning,
            ) from None
        finally:
            await _close(sdk_stream)
        yield assembler.finish()

    async def complete(self, messages: Sequence[dict[str, Any]]) -> str:
        """A whole answer without tools (used for summaries); raises :class:`LLMError`."""
        async with aclosing(self.stream(messages)) as parts:
            async for item in parts:
                if isinstance(item, AssembledRound):
                    return item.text
        raise AssertionError("unreachable: stream() ends with the assembled round or raises")  # pragma: no cover

    # --- helpers -----------------------------------------------------------------

    def _request(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        tool_choice: str | None,
    ) -> dict[str, Any]:
        config = self.config
        request: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "stream": True,
        }
        if self._ask_usage:
            request["stream_options"] = {"include_usage": True}
        if tools:
            request["tools"] = list(tools)
            if tool_choice:
                request["tool_choice"] = tool_choice
        if config.temperature is not None:
            request["temperature"] = config.temperature
        if config.top_p is not None:
            request["top_p"] = config.top_p
        if config.max_tokens is not None:
            request["max_tokens"] = config.max_tokens
        if config.extra_body:
            request["extra_body"] = dict(config.extra_body)
        return request

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter, or the server's ``Retry-After``; capped by ``retry_max_wait_s``."""
        retry_after = _retry_after(exc)
        if retry_after is None:
            retry_after = self._backoff_base_s * (2**attempt) * random.uniform(0.8, 1.2)
        return max(0.0, min(retry_after, self.config.retry_max_wait_s))

    def _redact(self, text: str) -> str:
        if self._secret and len(self._secret) >= 4:
            text = text.replace(self._secret, "***")
        return text

    def _provider_message(self, exc: BaseException) -> str:
        body = getattr(exc, "body", None)
        message = ""
        if isinstance(body, dict):
            inner = body.get("error", body)
            message = str(inner.get("message") or "") if isinstance(inner, dict) else str(inner)
        if not message:
            message = str(getattr(exc, "message", "") or exc)
        message = " ".join(self._redact(message).split())
        return message[:300] + ("…" if len(message) > 300 else "") or type(exc).__name__

    def _describe(self, exc: BaseException, *, attempts: int) -> str:
        """Plain words for a failure before the first token."""
        status = getattr(exc, "status_code", None)
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        host = _host(self.base_url)
        if isinstance(exc, openai.APITimeoutError):
            return f"The model service at {host} did not respond in time{tries}; check llm.base_url and the network"
        if isinstance(exc, (openai.APIConnectionError, OSError)):
            return f"Could not reach the model service at {host}{tries}; check llm.base_url and the network"
        if status == 401:
            return "The model service rejected the API key (HTTP 401); check llm.api_key"
        if status == 403:
            return f"The model service refused access (HTTP 403): {self._provider_message(exc)}; check llm.api_key's permissions for model {self.model!r}"
        if status == 404:
            return f"The model service does not know model {self.model!r} or the URL is wrong (HTTP 404); check llm.model and llm.base_url"
        if status == 429:
            code = _error_code(exc)
            if code in {"insufficient_quota", "quota_exceeded"} or "quota" in self._provider_message(exc).lower():
                return "The model service account is out of quota (HTTP 429); top up the account or use another llm.api_key"
            return f"The model service is rate limiting requests (HTTP 429){tries}; try again in a minute"
        if status is not None and status >= 500:
            return f"The model service had an internal error (HTTP {status}){tries}; try again shortly"
        if status is not None:
            return f"The model service rejected the request (HTTP {status}): {self._provider_message(exc)}"
        return f"The model service reported an error: {self._provider_message(exc)}"


async def _close(sdk_stream: Any) -> None:
    if sdk_stream is None:
        return
    try:
        await sdk_stream.close()
    except Exception:  # closing a broken stream may fail again; nothing to do about it
        pass


def _retry_after(exc: BaseException) -> float | None:
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
    code = getattr(exc, "code", None)
    if code:
        return str(code)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("code"):
            return str(inner["code"])
    return None


def _host(url: str) -> str:
    """``scheme://host:port`` of ``url`` without credentials or path."""
    parts = urlsplit(url)
    if not parts.hostname:
        return "the configured URL"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def round_s(seconds: float) -> float:
    """Seconds rounded for logs."""
    return round(seconds, 3)
