"""The model client: streamed chat completions from any OpenAI-compatible endpoint.

:class:`LLMClient` wraps ``openai.AsyncOpenAI`` with the SDK's own retries off,
because only we know when a retry is safe: connection errors, HTTP 408/409/429
and 5xx that happen *before the first token* are retried with bounded
exponential backoff honouring ``Retry-After``; once text has streamed, a
failure raises :class:`LLMInterrupted` carrying the partial text and is never
retried (a retry would repeat the text on the user's card). Usage is asked for
with ``stream_options``; an endpoint that rejects that option is asked again
without it (and never again), since usage is optional and the answer is not.

The SDK sends the request (auth, headers, timeouts, its errors for HTTP ≥ 400),
but the streamed body is read as raw SSE and each chunk parsed into a plain
dict (:mod:`botgateway.model.sse`): the SDK's object per chunk cost most of the CPU
of a stream. For the same reason the SDK's HTTP client sends and reads through
aiohttp (:mod:`botgateway.model.transport`), reads carry no timer of their own,
and the idle bound is one timer per stream (:class:`~botgateway.model.idle_watch.IdleWatch`).

Every failure is an :class:`LLMError` (:mod:`botgateway.model.errors`) whose
message is plain words, names the config key to check, and never contains the
API key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import openai
import structlog

from botgateway.background import BackgroundTasks
from botgateway.backoff import Backoff
from botgateway.config import LLMConfig
from botgateway.events import ModelAnswering
from botgateway.model.assembly import AssembledRound, StreamAssembler, StreamPart, merge_parts
from botgateway.model.errors import (
    LLMContextTooLong,
    LLMError,
    LLMInterrupted,
    LLMRefused,
    LLMUnavailable,
    endpoint_host,
    failure_error,
    provider_message,
    retry_after,
)
from botgateway.model.idle_watch import IdleWatch
from botgateway.model.sse import ChunkStream
from botgateway.model.transport import AiohttpTransport, sdk_http

__all__ = [
    "RETRYABLE_STATUS",
    "ChatModel",
    "LLMClient",
    "LLMContextTooLong",
    "LLMError",
    "LLMInterrupted",
    "LLMRefused",
    "LLMUnavailable",
    "ModelItem",
    "RoundItem",
    "default_http_client",
    "round_s",
]

log = structlog.get_logger(__name__)

_HTTP_RESPONSE = sdk_http().Response
"""``cast_to`` for the SDK's ``post``: the HTTP response itself, its body unread when streaming."""

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})
"""Statuses worth another try before the first token (overload, rate limit, gateway trouble)."""

RoundItem = StreamPart | AssembledRound
"""What :meth:`LLMClient.stream` yields: parts as they arrive, then the assembled round last."""

ModelItem = RoundItem | ModelAnswering
"""What a :class:`ChatModel` yields: a chain of endpoints (:mod:`botgateway.model.chain`) first says which answers."""


class ChatModel(Protocol):
    """What the tool loop needs from a model client."""

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncGenerator[ModelItem, None]:
        """Stream one completion: which model answers (optional), parts as they arrive, then the :class:`AssembledRound`."""
        ...


@dataclass(frozen=True)
class _Started:
    """A completion that has begun answering: its stream, its fold so far, and the parts to show first."""

    chunks: ChunkStream | None
    """The stream of chunks (``None`` if the request itself produced none)."""
    assembler: StreamAssembler
    """The fold of the chunks read so far."""
    first: tuple[StreamPart, ...]
    """The parts of the first chunk that carried any; empty when the stream ended before."""


class LLMClient:
    """Streaming chat completions with safe retries, timeouts and plain-words errors.

    Args:
        config: The ``llm`` section.
        base_url: Overrides the configured endpoint (the demo model, tests).
        http_client: An HTTP client for the SDK (``openai.DefaultAsyncHttpxClient(...)``), to tune
            connection limits or proxies; by default the SDK's own over aiohttp (:func:`default_http_client`).
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
        self._backoff = Backoff(base_s=backoff_base_s, jitter=(0.8, 1.2))
        self._closing = BackgroundTasks()  # connections of finished answers, released behind them
        self._client = openai.AsyncOpenAI(
            # Keyless endpoints (Ollama, vLLM, the demo) still get a placeholder: the SDK insists on one.
            api_key=self._secret or "no-key",
            base_url=resolved,
            max_retries=0,
            # Reads are bounded by our own first-token and idle timeouts, once per stream: a read timeout here
            # would arm and cancel a timer for every chunk. Connecting, sending and the pool keep a backstop.
            timeout=openai.Timeout(
                max(config.first_token_timeout_s, config.idle_timeout_s) + 5,
                connect=config.connect_timeout_s,
                read=None,
            ),
            http_client=http_client if http_client is not None else default_http_client(),
        )

    async def aclose(self) -> None:
        """Close the HTTP connections (the releases of finished answers still running are cut short)."""
        await self._closing.aclose()
        await self._client.close()

    # --- streaming -------------------------------------------------------------

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncGenerator[RoundItem, None]:
        """Stream one completion: :class:`TextPart`/``ReasoningPart``/``ToolCallFragment`` as they arrive, then the :class:`AssembledRound`.

        Raises :class:`LLMUnavailable` when nothing streamed (after retries) and
        :class:`LLMInterrupted` when the stream broke after the first token.
        """
        started = await self._start(self._request(messages, tools, tool_choice), round)
        chunks, assembler = started.chunks, started.assembler
        idle = IdleWatch(self.config.idle_timeout_s)  # one timer per stream, not one per chunk
        complete = False
        try:
            with self._interruptions(assembler):
                for part in started.first:
                    yield part
                if chunks is not None and started.first:
                    while True:
                        try:
                            chunk = await idle.next(chunks)
                        except StopAsyncIteration:
                            break
                        # What else already arrived goes up as one update: the busier the process, the
                        # fewer events per chunk, instead of a queue that grows behind the event loop.
                        parts, broken = self._feed_buffered(assembler, chunks, chunk)
                        for part in merge_parts(parts):
                            yield part
                        if broken is not None:
                            raise broken  # after what came before it is shown
            complete = True
        finally:
            idle.close()
            # A complete answer's connection is released behind it (the rest of its body is read first, for
            # reuse), so the round ends, and its card is finalized, without waiting for that read; a broken
            # or abandoned one is hung up on at once.
            if not (complete and self._closing.spawn(_close(chunks), name="llm-release")):
                await _close(chunks)
        yield assembler.finish()

    @staticmethod
    def _feed_buffered(
        assembler: StreamAssembler, chunks: ChunkStream, chunk: dict[str, Any]
    ) -> tuple[list[StreamPart], Exception | None]:
        """The parts of ``chunk`` and of the chunks received with it; the error of a broken one after them."""
        parts = assembler.feed(chunk)
        try:
            while (more := chunks.next_buffered()) is not None:
                parts.extend(assembler.feed(more))
        except Exception as exc:
            return parts, exc
        return parts, None

    async def _start(self, request: dict[str, Any], round: int) -> _Started:
        """Send the request and wait for the first parts, retrying while that is safe.

        Nothing has reached the user yet, so a retry cannot repeat text on the card.
        """
        attempt = 0
        while True:
            assembler = StreamAssembler(round)
            chunks: ChunkStream | None = None
            first: list[StreamPart] = []
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.config.first_token_timeout_s):
                    chunks = ChunkStream(await self._post(request))
                    while not first:
                        first = assembler.feed(await anext(chunks))
            except StopAsyncIteration:
                pass  # the stream ended before any text: an empty round, still a valid answer
            except TimeoutError:
                await _close(chunks)
                raise LLMUnavailable(
                    f"The model did not start answering within {self.config.first_token_timeout_s:g} s "
                    "(llm.first_token_timeout_s); it may be overloaded, try again shortly"
                ) from None
            except (openai.APIError, OSError) as exc:
                await _close(chunks)
                if not self._drop_stream_options(exc, request):
                    attempt = await self._retry_or_raise(exc, attempt)
                continue
            except ValueError as exc:
                # A chunk that is not JSON: a proxy or server that only looks OpenAI-compatible.
                await _close(chunks)
                log.warning("llm_malformed_stream", error=type(exc).__name__)
                raise LLMUnavailable(
                    f"The model service at {endpoint_host(self.base_url)} sent a stream that is not valid "
                    "OpenAI-compatible JSON; check that llm.base_url is the service's OpenAI-compatible …/v1 URL"
                ) from None
            except BaseException:
                # Stopped (user stop, shutdown) while the model was still thinking: hang up now, so the
                # provider stops generating (and billing) and the pooled connection is not left streaming.
                await _close(chunks)
                raise
            log.debug("llm_first_token", round=round, wait_s=round_s(time.monotonic() - started), attempts=attempt + 1)
            return _Started(chunks, assembler, tuple(first))

    async def _post(self, request: dict[str, Any]) -> Any:
        """Send ``request``; the HTTP response with its body still to read.

        The SDK sends it (auth, base URL, headers, timeouts, retries of refused connections, and
        ``APIStatusError`` for HTTP ≥ 400) as its generic ``post``, with the body as built here:
        ``chat.completions.create`` would first walk the whole request (every history message and tool
        schema) to convert typed parameters that a plain JSON body does not have, a few milliseconds per
        request, paid by every turn when many start at once.
        """
        body = {key: value for key, value in request.items() if key != "extra_body"}
        body.update(request.get("extra_body") or {})
        return await self._client.post(
            "/chat/completions", body=body, cast_to=_HTTP_RESPONSE, stream=True, stream_cls=openai.AsyncStream[Any]
        )

    def _drop_stream_options(self, exc: BaseException, request: dict[str, Any]) -> bool:
        """True when the endpoint rejected ``stream_options``: it is dropped from ``request`` (and every later one)."""
        status = getattr(exc, "status_code", None)
        if status in (400, 422) and "stream_options" in request and "stream_options" in provider_message(exc, self._secret):
            # An OpenAI-compatible server that does not know stream_options: usage is optional, the answer is not.
            log.warning("llm_stream_options_rejected", status=status)
            self._ask_usage = False
            request.pop("stream_options")
            return True
        return False

    async def _retry_or_raise(self, exc: BaseException, attempt: int) -> int:
        """Wait before retry ``attempt + 1`` and return its number, or raise :class:`LLMUnavailable`."""
        status = getattr(exc, "status_code", None)
        retryable = isinstance(exc, (openai.APIConnectionError, OSError)) or status in RETRYABLE_STATUS
        if retryable and attempt < self.config.max_retries:
            wait = self._retry_wait(attempt, exc)
            log.warning(
                "llm_retry",
                attempt=attempt + 1,
                max_retries=self.config.max_retries,
                status=status,
                error=type(exc).__name__,
                wait_s=round_s(wait),
            )
            await asyncio.sleep(wait)
            return attempt + 1
        error = failure_error(exc, attempts=attempt + 1, base_url=self.base_url, model=self.model, secret=self._secret)
        refused = isinstance(error, LLMRefused)
        log.warning("llm_unavailable", status=status, error=type(exc).__name__, attempts=attempt + 1, refused=refused)
        raise error from None

    @contextmanager
    def _interruptions(self, assembler: StreamAssembler) -> Iterator[None]:
        """Turn a failure after the first token into :class:`LLMInterrupted` carrying the partial output."""
        try:
            yield
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
                message = f"The model service stopped the answer with an error: {provider_message(exc, self._secret)}"
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

    def _retry_wait(self, attempt: int, exc: BaseException) -> float:
        """The server's ``Retry-After``, or exponential backoff with jitter; capped by ``retry_max_wait_s``."""
        wait = retry_after(exc)
        if wait is None:
            wait = self._backoff.delay(attempt)
        return max(0.0, min(wait, self.config.retry_max_wait_s))


def default_http_client() -> Any:
    """The SDK's HTTP client with its defaults (timeouts, limits, redirects) over :class:`AiohttpTransport`."""
    return openai.DefaultAsyncHttpxClient(transport=AiohttpTransport())


async def _close(chunks: ChunkStream | None) -> None:
    """Close the stream, if any; a broken one may fail to close, which changes nothing."""
    if chunks is None:
        return
    try:
        await chunks.close()
    except Exception:  # closing a broken stream may fail again; nothing to do about it
        pass


def round_s(seconds: float) -> float:
    """Seconds rounded for logs."""
    return round(seconds, 3)
