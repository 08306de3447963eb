"""The seam between the platform-neutral card pipeline and each chat platform.

An adapter provides a :class:`CardSink` that creates, updates and finalizes one
card, and raises the typed errors below so the streamer can pace, coalesce and
fall back without knowing the platform. Sinks only render and send: the calls
they make beyond the one the streamer paid for go through a :class:`CallPacer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.snapshot import CardSnapshot

__all__ = [
    "Adapter",
    "ArtifactSink",
    "CallPacer",
    "CardGone",
    "CardHandle",
    "CardOp",
    "CardSink",
    "CardTarget",
    "ChannelCards",
    "ChannelLines",
    "FleetLines",
    "LinePlace",
    "PermanentError",
    "PrivateNotes",
    "RateLimited",
    "Replanning",
    "SinkError",
    "TooLong",
    "TransientError",
    "parse_retry_after",
    "target_from_dict",
    "target_to_dict",
]

_T = TypeVar("_T")

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


def target_to_dict(target: CardTarget) -> dict[str, Any]:
    """A JSON-ready copy of ``target`` (for the Store and the wire), ``extra`` as a plain dict.

    When ``extra`` holds something that cannot be copied, only its plain values are kept.
    """
    try:
        return dataclasses.asdict(dataclasses.replace(target, extra=dict(target.extra)))
    except TypeError:
        data = {f.name: getattr(target, f.name) for f in dataclasses.fields(target)}
        data["extra"] = {k: v for k, v in target.extra.items() if isinstance(v, (str, int, float, bool, type(None)))}
        return data


def target_from_dict(data: Mapping[str, Any], **defaults: Any) -> CardTarget:
    """Rebuild a :class:`CardTarget` from :func:`target_to_dict`'s output; unknown keys are ignored.

    ``defaults`` fill fields the data lacks (a record written by an older release).
    """
    names = {f.name for f in dataclasses.fields(CardTarget)}
    kwargs = {**defaults, **{k: v for k, v in data.items() if k in names}}
    kwargs.setdefault("platform", "")
    kwargs.setdefault("chat_id", "")
    if not isinstance(kwargs.get("extra", {}), Mapping):
        kwargs["extra"] = {}
    return CardTarget(**kwargs)


@dataclass(frozen=True)
class CardHandle:
    """A created card, as the sink needs it to update the card later."""

    card_id: str
    """Platform id of the card (Slack message ts, DingTalk outTrackId)."""
    target: CardTarget
    """Where the card lives."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """Sink-private state (stream ids, mode); one key is shared: ``quote_key``, what a message quoting this card
    names it by (:attr:`botgateway.messages.InboundMessage.quoted_key`), when the platform quotes cards by a key."""


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
class ArtifactSink(Protocol):
    """A sink that delivers a turn's pictures (charts) its own way.

    The card's streamer hands each picture over once, beside the card's own
    calls, as soon as the card exists; what the sink answers (or raises) is
    folded into the card. The sink pays for its calls through its
    :class:`CallPacer`, from the platform's budgets, like any other call it
    makes. A sink that is not an ``ArtifactSink`` draws the pictures itself from
    the snapshot (a terminal's sparkline) or not at all.
    """

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """Deliver ``artifact`` for the card of ``target`` (``handle``: the card, when it was created live); returns
        what the card must show for it. Raises the typed sink errors; a throttle was already retried by the pacer."""
        ...


@runtime_checkable
class Replanning(Protocol):
    """A sink with more than one way to make a call, chosen from the budgets when the card is planned.

    A plan made from what the budgets showed can still meet a spent bucket: another
    replica of a fleet spent the workspace's window meanwhile, or the platform paused it.
    When the budget says the planned call cannot be granted soon, the card asks the
    sink to plan it another way instead of waiting (a Slack stream becomes an edited message).
    """

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The call planned for ``op`` of ``target`` cannot be granted soon: plan it another way.

        True when :meth:`CardSink.rate_key` now names another bucket for it; False when there is no other way
        (the card then waits for the call it planned).
        """
        ...


class LinePlace(Protocol):
    """One card's place in its channel's line for new messages (see :class:`ChannelLines`)."""

    async def turn(self) -> None:
        """Wait until the card may make its channel's next new message; at once when it may already."""
        ...

    def leave(self) -> None:
        """The card needs no place any more: its first message was made, or it ended without one. Idempotent."""
        ...


class FleetLines(Protocol):
    """Lines kept for the whole fleet (:class:`~botgateway.fleet.lines.RedisLines`): a channel's answers on every
    replica take its new messages in the order their questions were asked."""

    def now(self) -> float:
        """The unix time a place without its question's own time is ordered by."""
        ...

    async def join(self, line: str, member: str, order: float, *, announced: str = "") -> None:
        """``member`` joins ``line`` at ``order`` (its question's unix time), taking over the place of its question's
        announcement ``announced``."""
        ...

    def announce(self, line: str, member: str, order: float) -> None:
        """A question taken holds its place in ``line`` at ``order`` as ``member``, for a short while, until its
        card joins (in the background; a join or leave of it waits for the write)."""
        ...

    def leave(self, line: str, member: str) -> None:
        """``member`` leaves ``line`` (in the background)."""
        ...

    async def first(self, line: str, member: str, keep: Sequence[str] = ()) -> tuple[bool, int, int]:
        """Whether ``member`` heads ``line``, how many are ahead of it, and how many are in it; ``keep``: this
        process's other members of the line, still waiting."""
        ...

    async def size(self, line: str) -> int:
        """Members in ``line`` now."""
        ...


@runtime_checkable
class ChannelLines(Protocol):
    """A sink whose platform takes a channel's new messages slowly (Slack: about one a second per channel).

    When many answers wait for one channel, its new messages go in the order the
    questions came: each card lines up when it starts, and makes its first
    message when its turn comes, with whatever it shows by then: an answer that
    is ready by its turn goes out finished, in one message, and one still being
    written starts its live card. Waiting in line is never cut short by the
    answer ending: a card that left its place would lose it.
    """

    def line_up(self, target: CardTarget) -> LinePlace:
        """A place at the end of the line of ``target``'s channel, for the card of ``target``."""
        ...


@runtime_checkable
class PrivateNotes(Protocol):
    """A sink that can show a note to one person only (Slack's ephemeral messages, a DingTalk 1:1 message).

    The gateway uses it for notes meant for one person (``/whoami``, a refused
    approval vote) and falls back to a note in the thread when a sink cannot.
    """

    async def private_note(self, target: CardTarget, user_id: str, text: str) -> bool:
        """Show ``text`` to ``user_id`` alone, near ``target``; False when the platform cannot here (nothing was sent)."""
        ...


@runtime_checkable
class ChannelCards(Protocol):
    """An adapter that can post a card into a channel unprompted: an alert's card, a scheduled report.

    Nobody asked, so there is no message to answer: the adapter says what a card in
    the channel looks like to its sink, and what a reply to that card continues.
    """

    name: str
    """Adapter name, as in :attr:`CardTarget.platform`."""
    edits_in_place: bool
    """Whether its cards can be changed after they are posted (False: a DingTalk robot message, which cannot;
    each change of an alert is then a new message, and a repeat posts nothing)."""

    def channel_target(self, chat_id: str, *, locale: str) -> CardTarget:
        """Where a new card in channel ``chat_id`` goes (a top-level message, in a group), in ``locale``."""
        ...

    async def adopt_thread(self, handle: CardHandle) -> str | None:
        """Make replies to the posted card ``handle`` a conversation with the bot (a Slack thread reply needs no
        mention); returns that conversation's id, or None when the platform has no thread to continue."""
        ...


class CallPacer(Protocol):
    """Pays for the platform calls a sink makes beyond the one the streamer drew a token for.

    A Stop control message under a native stream, its deletion, the new message
    of a rolled-over stream, a card made another way than planned: the sink
    names the call's bucket and hands over the call; the pacer waits for a token
    of that bucket (shared with every card), makes the call and, when the
    platform throttles it, pauses the bucket for everyone and tries again, up to
    ``attempts`` calls in all. The call must raise the typed sink errors; the
    last one is raised when the tries run out. Pacing and retries stay in the
    core, in one place. A call the sink knows it will have to make (a cleanup)
    is reserved ahead, like a card's final, so live updates cannot spend it.
    """

    async def call(
        self,
        key: str,
        limit: RateLimit,
        fn: Callable[[], Awaitable[_T]],
        *,
        owner: str,
        priority: bool = False,
        attempts: int = 1,
        reserved: bool = False,
    ) -> _T:
        """Make ``fn()`` once a token of ``key`` is free; returns its result.

        ``reserved``: the call uses one call ``owner`` :meth:`reserved <reserve>`; it goes as a priority
        call, and the reservation is spent once the call lands (or what it acts on is gone: ``CardGone``).
        """
        ...

    def reserve(self, key: str, limit: RateLimit, owner: str) -> None:
        """Keep one call of ``key`` for ``owner``, planned like a card's final (a cleanup: a control's delete).

        Live updates leave it alone; a later :meth:`call` with ``reserved=True`` uses it.
        """
        ...

    def release(self, key: str, owner: str) -> None:
        """``owner`` needs nothing more of ``key``: give back the calls it still holds (never made, or failed)."""
        ...

    def spare(self, key: str, limit: RateLimit) -> float:
        """Calls of ``key`` free now beyond what open cards reserved for their finals (a sink plans its mode by it)."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """A platform front end that ``botgateway run`` starts and stops.

    Built by the composition root (:mod:`botgateway.cli`). ``start``
    connects and hands each parsed message to ``gateway.submit`` (returning at
    once); ``stop`` disconnects. After ``start`` the adapter exposes its
    :class:`CardSink` as ``sink`` so cards a previous process left open can be
    finalized. An adapter that can end on its own (the terminal chat when the
    user quits) sets an ``ended`` :class:`asyncio.Event`; ``run`` then shuts down.

    On SIGTERM ``run`` drains: ``stop_receiving`` closes the inbound side only
    (the platform then delivers to other processes), while the sink still
    finishes the cards of the answers in progress; ``stop`` comes after them.
    """

    name: str
    """Adapter name: ``terminal``, ``slack``, ``dingtalk``."""

    @property
    def connected(self) -> bool:
        """Whether it can take questions now (its socket is open, or its HTTP listener is up): ``/readyz`` asks."""
        ...

    async def start(self, gateway: Any) -> None:
        """Connect and start handing messages to ``gateway`` (a :class:`botgateway.gateway.Gateway`)."""
        ...

    async def stop_receiving(self) -> None:
        """Take no new messages (close the socket or the listener); the sink keeps working. Idempotent."""
        ...

    async def stop(self) -> None:
        """Disconnect; running turns are the gateway's to stop."""
        ...
