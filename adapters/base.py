"""The seam between the platform-neutral card pipeline and each chat platform.

An adapter provides a :class:`CardSink` that creates, updates and finalizes one
card, and raises the typed errors below so the streamer can pace, coalesce and
fall back without knowing the platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from botgateway.card import CardSnapshot

CardOp: TypeAlias = Literal["create", "update", "finalize", "fallback"]
"""The kinds of platform call a card makes; each draws from a rate budget."""


@dataclass(frozen=True)
class CardTarget:
    """Where a card goes and who it answers."""

    platform: str
    """Adapter name: ``slack``, ``dingtalk``, ``terminal``."""
    chat_id: str
    """Channel / conversation id on the platform."""
    turn_id: str = ""
    """The gateway's id of the turn this card shows (used by stop buttons)."""
    thread_id: str | None = None
    """Thread to answer in (Slack ``thread_ts``), if any."""
    user_id: str = ""
    """The asker's platform id."""
    user_name: str = ""
    """The asker's display name."""
    is_group: bool = False
    """Group chat / channel (True) or direct chat (False)."""
    locale: str = "en"
    """``en`` or ``zh-CN``."""
    workspace_id: str = ""
    """Slack team id, DingTalk corp id / robot code: the scope of shared rate budgets."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Platform data the sink needs (DingTalk session webhook, Slack assistant thread...)."""


@dataclass(frozen=True)
class CardHandle:
    """A created card, as the sink needs it to update the card later."""

    card_id: str
    """Platform id of the card (Slack message ts, DingTalk outTrackId)."""
    target: CardTarget
    """Where the card lives."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """Sink-private state (stream ids, mode)."""


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: sustained ``rate_per_s`` with bursts up to ``burst``."""

    rate_per_s: float
    """Refill rate in calls per second."""
    burst: int = 1
    """Bucket size."""


class SinkError(Exception):
    """Base of the typed errors a sink raises. Messages never contain secrets."""


class RateLimited(SinkError):
    """The platform throttled the call (HTTP 429, DingTalk 403 QpsLimit, Slack ``ratelimited``)."""

    def __init__(self, retry_after: float | None = None, message: str = "rate limited") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the platform asked us to wait, when it said."""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds in a ``Retry-After`` header (delay-seconds form), or ``None`` when absent or unusable.

    Negative, non-finite and non-numeric values are ignored rather than trusted:
    ``float("inf")`` would pause a budget forever.
    """
    if value is None:
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None  # NaN fails the comparison too


class TransientError(SinkError):
    """A failure worth retrying with backoff (5xx, connection reset, timeout)."""


class CardGone(SinkError):
    """The card can no longer be updated (deleted, expired stream, unknown id)."""


class TooLong(SinkError):
    """The rendered card exceeds what the platform accepts."""


class PermanentError(SinkError):
    """A failure that retrying will not fix (bad token, missing scope, bad template)."""


@runtime_checkable
class CardSink(Protocol):
    """Creates, updates and finalizes one platform's cards.

    Sinks render :class:`CardSnapshot` into their own markup and raise the typed
    errors above; pacing, coalescing and retries are the streamer's job.
    """

    platform: str
    """Adapter name, as in :attr:`CardTarget.platform`."""
    max_chars: int
    """Largest answer text one card can safely show; longer answers continue in a new part."""

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """The shared budget a call of ``op`` for ``target`` draws from: its key and limit.

        Cards sharing the key (all cards of one Slack workspace for ``chat.update``)
        share the bucket.
        """
        ...

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Create the card showing ``snapshot``."""
        ...

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Replace the card's content with ``snapshot``; returns the (possibly new) handle."""
        ...

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` (done, failed or stopped) and end streaming."""
        ...

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """Deliver ``snapshot`` another way (a plain new message) when the card cannot be updated."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """A platform front end that ``botgateway run`` starts and stops.

    Built by the module's ``create_adapter(adapter_config, runtime)``. ``start``
    connects and hands each parsed message to ``gateway.submit`` (returning at
    once); ``stop`` disconnects. After ``start`` the adapter exposes its
    :class:`CardSink` as ``sink`` so cards a previous process left open can be
    finalized. An adapter that can end on its own (the terminal chat when the
    user quits) sets an ``ended`` :class:`asyncio.Event`; ``run`` then shuts down.
    """

    name: str
    """Adapter name: ``terminal``, ``slack``, ``dingtalk``."""

    async def start(self, gateway: Any) -> None:
        """Connect and start handing messages to ``gateway`` (a :class:`botgateway.gateway.Gateway`)."""
        ...

    async def stop(self) -> None:
        """Disconnect; running turns are the gateway's to stop."""
        ...
