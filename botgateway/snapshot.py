"""What a card shows at one moment: the render data adapters draw from.

:class:`CardSnapshot` and its blocks are plain frozen data: the card state
(:mod:`botgateway.cards.state`) produces them, the streamer hands them to a
sink, and each adapter renders them into its own markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from botgateway.artifacts import ArtifactView

__all__ = ["ApprovalPrompt", "Block", "CardSnapshot", "CardStatus", "Narration", "Phase", "ToolLine", "ToolStatus"]

CardStatus: TypeAlias = Literal["queued", "working", "streaming", "done", "failed", "stopped"]
"""Lifecycle of a card: queued behind another turn, working (thinking or tools),
streaming the answer, then one of the three final states."""

ToolStatus: TypeAlias = Literal["running", "waiting", "done", "failed"]
"""running; waiting for a person's approval before it runs; then done or failed."""


@dataclass(frozen=True)
class Narration:
    """Visible text the model wrote in a round that went on to call tools."""

    round: int
    """The round the text belongs to."""
    text: str
    """The narration text."""


@dataclass(frozen=True)
class ToolLine:
    """One status line per tool call."""

    call_id: str
    """The call's id within the turn."""
    name: str
    """The tool's name."""
    args_preview: str
    """Key arguments in short form (``ip=10.0.1.100``)."""
    status: ToolStatus
    """running, then done or failed."""
    duration_s: float | None = None
    """Wall time once finished."""
    summary: str = ""
    """Outcome on success, reason on failure."""
    approval: str = ""
    """The call's approval, in words ("✅ approved by @alice"); empty when it needed none."""
    freshness: str = ""
    """How old the cached data behind a result is, when that is worth saying ("cached 12 min ago"); else empty."""


Block: TypeAlias = Narration | ToolLine


@dataclass(frozen=True)
class ApprovalPrompt:
    """A call waiting for an approver: what the card asks, and the code its buttons carry."""

    code: str
    """Short code (``4821``): what approvers type (``approve 4821``), and part of the buttons' value."""
    token: str
    """The rest of the buttons' value: a press decides this request and no other."""
    call_id: str
    """The waiting call (its tool line shows the outcome once decided)."""
    tool: str
    """The tool that would run."""
    arguments: str
    """All of its arguments, as JSON: an approver sees exactly what would run."""
    asker: str
    """Who asked for it."""
    timeout_s: float
    """How long it waits before it counts as denied."""


@dataclass(frozen=True)
class CardSnapshot:
    """Everything a sink needs to render the card at one moment.

    Snapshots are full, not deltas: each one replaces the previous rendering.
    """

    status: CardStatus
    """Where the turn is in its lifecycle."""
    blocks: tuple[Block, ...] = ()
    """Narration and tool lines, in time order."""
    thought: str = ""
    """The tail (about 200 characters) of the model's reasoning; empty once the answer starts or when hidden."""
    answer: str = ""
    """The answer text so far (no cursor; renderers add one while ``status == 'streaming'``)."""
    error: str = ""
    """Plain-words failure or stop note for a final card."""
    footer: str = ""
    """Rendered footer line (round n/N · tokens · elapsed · model — sources: …), or empty when disabled."""
    locale: str = "en"
    """``en`` or ``zh-CN``: the language of the card's fixed strings."""
    asker: str = ""
    """Display name of the person who asked (shown in group chats)."""
    part: int = 1
    """1 for the first card of a turn; 2, 3… for continuation cards of a long answer."""
    seq: int = 0
    """Monotonic version of the snapshot within its card; higher is newer."""
    continued: bool = False
    """True for a part whose answer continues in the next card (part + 1)."""
    queue_position: int = 0
    """Place in line while ``status == 'queued'`` (1 = next); 0 when unknown or not queued."""
    approvals: tuple[ApprovalPrompt, ...] = ()
    """Calls waiting for an approver now (empty on final cards)."""
    preamble: str = ""
    """Markdown shown above the blocks, written by the gateway from outside data (an alert's status on its card);
    renderers treat it like model text (no mass mentions, no remote images). Empty on a plain answer card."""
    artifacts: tuple[ArtifactView, ...] = ()
    """The turn's pictures (charts) and where their delivery is; renderers show the embedded ones and a line for each
    that failed (:func:`botgateway.cards.render.artifact_lines`)."""

    @property
    def final(self) -> bool:
        """True for done, failed and stopped cards."""
        return self.status in ("done", "failed", "stopped")


Phase: TypeAlias = Literal["thinking", "tool", "answer"]
"""What the turn is doing now; the streamer paces updates per phase."""
