"""The model: an OpenAI-compatible streaming client and the chain of endpoints, with breakers and routes.

Also its transport and SSE reader, and the assembly of streamed tool calls.
"""

from __future__ import annotations

from botgateway.model.assembly import (
    AssembledRound,
    AssembledToolCall,
    ReasoningPart,
    StreamAssembler,
    TextPart,
    ThinkTagSplitter,
    ToolCallFragment,
    merge_parts,
)
from botgateway.model.breaker import Attempt, CircuitBreaker
from botgateway.model.chain import ModelChain, build_chain
from botgateway.model.client import (
    ChatModel,
    LLMClient,
    LLMContextTooLong,
    LLMInterrupted,
    LLMRefused,
    LLMUnavailable,
    ModelItem,
)
from botgateway.model.errors import LLMError
from botgateway.model.idle_watch import IdleWatch
from botgateway.model.routes import asking
from botgateway.model.sse import BODY_READER, ChunkStream, ServerSentEvent, SSEDecoder
from botgateway.model.transport import AiohttpTransport, sdk_http

__all__ = [
    "BODY_READER",
    "AiohttpTransport",
    "AssembledRound",
    "AssembledToolCall",
    "Attempt",
    "ChatModel",
    "ChunkStream",
    "CircuitBreaker",
    "IdleWatch",
    "LLMClient",
    "LLMContextTooLong",
    "LLMError",
    "LLMInterrupted",
    "LLMRefused",
    "LLMUnavailable",
    "ModelChain",
    "ModelItem",
    "ReasoningPart",
    "SSEDecoder",
    "ServerSentEvent",
    "StreamAssembler",
    "TextPart",
    "ThinkTagSplitter",
    "ToolCallFragment",
    "asking",
    "build_chain",
    "merge_parts",
    "sdk_http",
]
