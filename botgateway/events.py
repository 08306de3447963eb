"""The typed event stream of one turn.

Everything downstream of the tool loop (the card, the terminal, ``ask --json``,
tests and benchmarks) is a pure consumer of these events. Each is a frozen
dataclass with a ``kind`` discriminator so it serializes to one JSON object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

from botgateway.artifacts import Artifact
from botgateway.tooling.contract import Source

__all__ = [
    "AnswerDelta",
    "ApprovalDecided",
    "ApprovalRequested",
    "ApprovalVerdict",
    "EventListener",
    "FailureReason",
    "ModelAnswering",
    "RoundStarted",
    "ThoughtDelta",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallStarted",
    "TurnDone",
    "TurnEvent",
    "TurnFailed",
    "TurnResult",
    "Usage",
    "UsageReported",
    "event_to_dict",
]


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts reported by the model, summed over the rounds of a turn."""

    prompt_tokens: int = 0
    """Tokens the model read (history, tools, question)."""
    completion_tokens: int = 0
    """Tokens the model generated (thought, narration, tool calls, answer)."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the provider served from its prompt cache (0 when it does not say)."""
    reasoning_tokens: int = 0
    """Of the completion tokens, those spent reasoning (0 when the provider does not say)."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        """The counts of two rounds (or turns) together."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    """One tool call of a finished turn, as reported in the turn result."""

    call_id: str
    """The id the model gave the call (or one we assigned when it gave none)."""
    name: str
    """The tool's name as the model called it."""
    arguments: dict[str, Any]
    """The parsed arguments; empty when they were not valid JSON."""
    ok: bool
    """Whether the tool succeeded."""
    summary: str
    """The one-line outcome shown on the card ("2 instances found", "timed out after 10 s")."""
    duration_s: float
    """Wall time of the call in seconds."""
    round: int
    """The round (1-based) the call was made in."""


@dataclass(frozen=True, kw_only=True)
class TurnResult:
    """What a completed turn produced."""

    answer: str
    """The final answer text as the user sees it (thought excluded)."""
    tool_calls: tuple[ToolCallRecord, ...] = ()
    """Every tool call of the turn, in the order the model made them."""
    usage: Usage = field(default_factory=Usage)
    """Token usage summed over all rounds; zeros when the provider reported none."""
    rounds: int = 1
    """How many model rounds the turn took."""
    hit_max_rounds: bool = False
    """True when the turn was closed because it reached ``max_rounds``."""


@dataclass(frozen=True, kw_only=True)
class RoundStarted:
    """A new streamed completion (one model round) begins."""

    round: int
    """1-based round number."""
    max_rounds: int
    """The configured ceiling on rounds for this turn."""
    kind: Literal["round_started"] = "round_started"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class ModelAnswering:
    """The model that answers this round, known once its first token arrived (``llm.fallbacks``, ``llm.routes``)."""

    model: str
    """The model's name as configured (``deepseek-chat``)."""
    endpoint: str
    """The endpoint's name: ``primary``, a fallback's or a route's name."""
    fallback_from: str = ""
    """The endpoint that failed before the first token, when this one stands in for it; empty otherwise."""
    kind: Literal["model_answering"] = "model_answering"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class ThoughtDelta:
    """A fragment of the model's reasoning (``reasoning_content``, ``reasoning`` or ``<think>``)."""

    text: str
    """The new reasoning text, to be appended to what came before."""
    kind: Literal["thought_delta"] = "thought_delta"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class AnswerDelta:
    """A fragment of visible model text.

    Text of a round that goes on to call tools is that round's narration; text of
    the last round is the answer. The consumer learns which when a
    :class:`ToolCallStarted` arrives in the same round.
    """

    text: str
    """The new text, to be appended to what came before in this round."""
    kind: Literal["answer_delta"] = "answer_delta"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted:
    """The model called a tool and the call is now running."""

    call_id: str
    """Stable id of the call within the turn."""
    name: str
    """The tool's name as the model called it."""
    arguments: dict[str, Any]
    """Parsed arguments; empty when the model sent invalid JSON."""
    kind: Literal["tool_call_started"] = "tool_call_started"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished:
    """A tool call ended, successfully or not."""

    call_id: str
    """Matches the :class:`ToolCallStarted` event's ``call_id``."""
    name: str
    """The tool's name as the model called it."""
    ok: bool
    """False when the tool failed, timed out, was unknown, refused or got bad arguments."""
    summary: str
    """One line for the card: the outcome on success, the reason on failure."""
    duration_s: float
    """Wall time of the call in seconds."""
    sources: tuple[Source, ...] = ()
    """Where its data came from and how old it is (provider, account, region, API, fetch time, cached)."""
    artifacts: tuple[Artifact, ...] = ()
    """Pictures the tool drew for the card (a chart); serialized without their pixels."""
    kind: Literal["tool_call_finished"] = "tool_call_finished"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested:
    """A call needs a human's approval and waits for it before it runs (:mod:`botgateway.approvals.desk`)."""

    call_id: str
    """The waiting call (its :class:`ToolCallStarted` came first)."""
    name: str
    """The tool's name."""
    code: str
    """The short code an approver presses or types (``approve 4821``)."""
    token: str
    """What the buttons carry besides the code: a press decides this request and no other."""
    arguments: dict[str, Any]
    """The call's parsed arguments: what would run."""
    asker: str
    """Who asked, as shown to approvers (display name, else the qualified id)."""
    timeout_s: float
    """How long the call waits for a decision; then it is denied."""
    kind: Literal["approval_requested"] = "approval_requested"
    """Discriminator: which event this is, the first key of its JSON object."""


ApprovalVerdict: TypeAlias = Literal["approved", "denied", "timeout", "unavailable", "too_long"]
"""How an approval ended: an approver decided, nobody did in time, no approval can be given here, or the
arguments are too long to show an approver in full (so nobody could know what they approve)."""


@dataclass(frozen=True, kw_only=True)
class ApprovalDecided:
    """An approval ended; an approved call runs now, any other fails without running."""

    call_id: str
    """The call that waited."""
    name: str
    """The tool's name."""
    code: str
    """The approval's code."""
    verdict: ApprovalVerdict
    """approved, denied, timeout, unavailable or too_long."""
    by: str = ""
    """Who decided, as shown on the card (``@alice``); empty for a timeout."""
    by_id: str = ""
    """The decider's qualified id (``slack:U0ALICE``), for the audit; empty for a timeout."""
    kind: Literal["approval_decided"] = "approval_decided"
    """Discriminator: which event this is, the first key of its JSON object."""

    @property
    def approved(self) -> bool:
        """Whether the call may run."""
        return self.verdict == "approved"


@dataclass(frozen=True, kw_only=True)
class UsageReported:
    """The provider reported token usage for one round."""

    prompt_tokens: int
    """Prompt tokens of this round."""
    completion_tokens: int
    """Completion tokens of this round."""
    cached_tokens: int = 0
    """Of the prompt tokens, those served from the provider's prompt cache (0 when it does not say)."""
    reasoning_tokens: int = 0
    """Of the completion tokens, those spent reasoning (0 when the provider does not say)."""
    model: str = ""
    """The model that answered the round (see :class:`ModelAnswering`); empty when unknown."""
    kind: Literal["usage_reported"] = "usage_reported"
    """Discriminator: which event this is, the first key of its JSON object."""


@dataclass(frozen=True, kw_only=True)
class TurnDone:
    """The turn completed; history has been committed."""

    result: TurnResult
    """The answer, tool calls and usage of the turn."""
    kind: Literal["turn_done"] = "turn_done"
    """Discriminator: which event this is, the first key of its JSON object."""


FailureReason: TypeAlias = Literal[
    "llm_unavailable",  # could not reach the model, or it refused, before any output
    "interrupted",  # the model stream broke after output had started
    "cancelled",  # the user pressed stop or the gateway shut down
    "internal",  # a bug of ours; the message is still safe to show
    "timeout",  # the whole turn ran past llm.turn_timeout_s
    "llm_refused",  # the model service refused the request (HTTP 4xx: too long, invalid…)
    "refused",  # the access policy refused the asker there (``ask --as``)
    "usage",  # the command was given something it cannot use (an empty question, a malformed principal)
]
"""Why a turn ended without a complete answer (:attr:`TurnFailed.reason`)."""


@dataclass(frozen=True, kw_only=True)
class TurnFailed:
    """The turn ended without a complete answer; history is unchanged."""

    reason: FailureReason
    """Machine-readable cause, for localization and metrics."""
    message: str
    """A plain-words explanation that is safe to show to the user (no traceback, no secret)."""
    partial_answer: str = ""
    """Whatever answer text had already streamed, so it is not lost."""
    kind: Literal["turn_failed"] = "turn_failed"
    """Discriminator: which event this is, the first key of its JSON object."""


TurnEvent: TypeAlias = (
    RoundStarted
    | ModelAnswering
    | ThoughtDelta
    | AnswerDelta
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequested
    | ApprovalDecided
    | UsageReported
    | TurnDone
    | TurnFailed
)
"""Any event of a turn's stream; dispatch on the type or on ``kind``."""

EventListener: TypeAlias = Callable[[TurnEvent], None]
"""Told of each event of one turn, in order, as the card is (an API client's stream): it must return at once and
never block the turn (a slow client's listener ends its own stream instead); what it raises is logged and ignored."""


def event_to_dict(event: TurnEvent) -> dict[str, Any]:
    """A JSON-ready dict of an event, ``kind`` first; an artifact is described, its pixels left out."""
    data = asdict(event)
    if isinstance(event, ToolCallFinished):
        data["artifacts"] = [a.describe() for a in event.artifacts]
    return {"kind": data.pop("kind"), **data}
