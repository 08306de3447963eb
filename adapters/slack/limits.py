"""Slack's rate buckets, and how the sink hands the calls it makes on its own to the pacer.

Slack's tiers are per workspace per method, counted in per-minute windows for
all cards together: ``chat.update`` and ``chat.delete`` Tier 3,
``chat.startStream`` and ``chat.stopStream`` Tier 2, ``chat.appendStream`` Tier 4.
Beside the tiers, a channel takes about one new message a second, with short
bursts, threads included: every message creation in one channel
(``chat.postMessage``, and ``chat.startStream`` unless
``stream_starts_per_channel`` is off) draws from that channel's bucket
(:meth:`SlackBuckets.post_bucket`). ``reactions.add`` (the sign a question was
taken) is Tier 3 and makes no message. A chart's upload makes
two Tier 4 calls, ``files.getUploadURLExternal`` and ``files.completeUploadExternal``. :class:`SlackBuckets`
names the bucket (key and limit) each call draws from.

The streamer pays for the one call it asked the sink for. Any other call (a
Stop control, a rollover's new stream, a placeholder where a stream was
planned) goes through the :class:`~botgateway.sink.CallPacer` with
:func:`paced` or :func:`on_own_budget`; the sink never paces or retries itself.
A call the sink will have to make later (a Stop control's delete) is
:func:`reserved <reserve>` when it is planned, like a card's final.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from botgateway.budget import RateLimit
from botgateway.sink import CallPacer, CardTarget, RateLimited, TransientError

if TYPE_CHECKING:
    from botgateway.config import SlackConfig

__all__ = [
    "DELETE_RATE_PER_MIN", "FILES_RATE_PER_MIN", "REACTIONS_RATE_PER_MIN", "Bucket", "SlackBuckets",
    "channel_limit", "on_own_budget", "paced", "release", "reserve", "window_limit",
]

_T = TypeVar("_T")

Bucket: TypeAlias = tuple[str, RateLimit]
"""A shared budget's key and limit, as :meth:`~botgateway.sink.CardSink.rate_key` returns them."""

DELETE_RATE_PER_MIN = 50.0
"""``chat.delete`` is Tier 3 (50+ per minute per workspace)."""

FILES_RATE_PER_MIN = 100.0
"""``files.getUploadURLExternal`` and ``files.completeUploadExternal`` are Tier 4 (100+ per minute per workspace)."""

REACTIONS_RATE_PER_MIN = 50.0
"""``reactions.add`` is Tier 3 (50+ per minute per workspace)."""

_NO_CALL = RateLimit(rate_per_s=1000.0, burst=1000)


def window_limit(calls: float, window_s: float) -> RateLimit:
    """Slack's tier as a window: at most ``calls`` in any ``window_s`` seconds, spendable in a burst.

    Slack counts a call when it arrives; the budget counts it from its answer (:meth:`Ledger.landed
    <botgateway.budget.ledgers.base.Ledger.landed>`), by when it has arrived, so the window needs no margin
    for the network's skew. The budget plans the window across all open cards (finals reserved, live updates
    from the rest); a tier lower than documented is learned from its first throttle.
    """
    return RateLimit.window(max(int(calls), 1), window_s)


def channel_limit(rate_per_s: float, burst: int) -> RateLimit:
    """A channel's new messages: ``burst`` at once, about ``rate_per_s`` a second on average.

    Slack counts a message when it arrives, ``burst`` in any ``burst / rate_per_s`` seconds: "about one a
    second, with short bursts". A message granted on time may arrive a moment late (a slow request before it,
    a busy loop), so each counts from its grant until a window after its answer came back (a limit on
    arrivals): the channel's next burst waits one round trip more, never a fixed margin of the window.
    """
    window_s = burst / rate_per_s
    return RateLimit(rate_per_s=rate_per_s, burst=burst, arrivals_per_s=burst, arrival_window_s=window_s)


@dataclass(frozen=True, kw_only=True)
class SlackBuckets:
    """The limits of Slack's methods, and the bucket each call for a card draws from."""

    update: RateLimit
    """``chat.update``, per workspace."""
    stream: RateLimit
    """``chat.appendStream``, per workspace."""
    stop: RateLimit
    """``chat.stopStream``, per workspace (Tier 2, like ``startStream``)."""
    start: RateLimit
    """``chat.startStream`` (Tier 2: new streams, continuation parts, rollovers), per workspace."""
    post: RateLimit
    """New messages in one channel: ``chat.postMessage`` (placeholders, finished answers, fallbacks, Stop controls),
    and ``chat.startStream`` when ``stream_starts_per_channel``."""
    delete: RateLimit
    """``chat.delete``, per workspace."""
    files: RateLimit
    """Each of the two ``files.*`` calls of an upload, per workspace (one bucket per method)."""
    reactions: RateLimit
    """``reactions.add``, per workspace."""

    @classmethod
    def from_config(cls, config: SlackConfig) -> SlackBuckets:
        """The limits ``config`` sets, each over its ``rate_window_s`` window."""
        window = config.rate_window_s
        return cls(
            update=window_limit(config.update_rate_per_min, window),
            stream=window_limit(config.append_rate_per_min, window),
            stop=window_limit(config.stop_stream_rate_per_min, window),
            start=window_limit(config.start_stream_rate_per_min, window),
            post=channel_limit(config.post_rate_per_s, config.post_burst),
            delete=window_limit(DELETE_RATE_PER_MIN, window),
            files=window_limit(FILES_RATE_PER_MIN, window),
            reactions=window_limit(REACTIONS_RATE_PER_MIN, window),
        )

    def update_bucket(self, target: CardTarget) -> Bucket:
        """``chat.update`` of ``target``'s workspace."""
        return f"slack:{_team(target)}:chat.update", self.update

    def stream_bucket(self, target: CardTarget) -> Bucket:
        """Stream appends of ``target``'s workspace."""
        return f"slack:{_team(target)}:stream", self.stream

    def stop_bucket(self, target: CardTarget) -> Bucket:
        """``chat.stopStream`` of ``target``'s workspace."""
        return f"slack:{_team(target)}:chat.stopStream", self.stop

    def start_bucket(self, target: CardTarget) -> Bucket:
        """``chat.startStream`` of ``target``'s workspace."""
        return f"slack:{_team(target)}:chat.startStream", self.start

    def post_bucket(self, target: CardTarget) -> Bucket:
        """New messages in ``target``'s channel (``chat.postMessage``; ``chat.startStream`` too, when counted)."""
        return f"slack:{_team(target)}:post:{target.chat_id}", self.post

    def reaction_bucket(self, target: CardTarget) -> Bucket:
        """``reactions.add`` of ``target``'s workspace."""
        return f"slack:{_team(target)}:reactions.add", self.reactions

    def no_call_bucket(self, target: CardTarget) -> Bucket:
        """What a deferred answer's creation and updates draw from: they make no call, so nothing limits them."""
        return f"slack:{_team(target)}:no-call", _NO_CALL

    def delete_bucket(self, target: CardTarget) -> Bucket:
        """``chat.delete`` of ``target``'s workspace."""
        return f"slack:{_team(target)}:chat.delete", self.delete

    def files_bucket(self, target: CardTarget, method: str) -> Bucket:
        """``method`` (``files.getUploadURLExternal`` or ``files.completeUploadExternal``) of ``target``'s workspace."""
        return f"slack:{_team(target)}:{method}", self.files


async def paced(
    pacer: CallPacer | None,
    bucket: Bucket,
    fn: Callable[[], Awaitable[_T]],
    *,
    owner: str,
    priority: bool = False,
    attempts: int = 1,
    reserved: bool = False,
) -> _T:
    """``fn()`` paid from ``bucket`` by ``pacer`` (see :class:`~botgateway.sink.CallPacer`); without one, made directly.

    ``fn`` must raise the typed sink errors (:func:`~adapters.slack.errors.call_slack`). ``reserved``: the
    call uses what ``owner`` reserved of ``bucket`` (:func:`reserve`).
    """
    if pacer is None:
        return await fn()
    key, limit = bucket
    return await pacer.call(key, limit, fn, owner=owner, priority=priority, attempts=attempts, reserved=reserved)


def reserve(pacer: CallPacer | None, bucket: Bucket, owner: str) -> None:
    """Keep one call of ``bucket`` for ``owner`` (a cleanup the sink will have to make), planned like a final."""
    if pacer is not None:
        key, limit = bucket
        pacer.reserve(key, limit, owner)


def release(pacer: CallPacer | None, bucket: Bucket, owner: str) -> None:
    """Give back what ``owner`` still holds of ``bucket`` (the cleanup was made, failed for good, or is not needed)."""
    if pacer is not None:
        pacer.release(bucket[0], owner)


async def on_own_budget(
    pacer: CallPacer | None, bucket: Bucket, target: CardTarget, fn: Callable[[], Awaitable[_T]]
) -> _T:
    """A card call on another bucket than the one the streamer drew from for this sink call.

    The pacer draws the token (before the card's other calls: ``priority``). When
    Slack throttles the call, the pacer pauses this bucket and the throttle comes
    back as a :class:`TransientError`: the streamer retries without pausing its own
    bucket, which Slack did not throttle, and the retry waits here for this one.
    Without a pacer the throttle goes to the caller as is.
    """
    if pacer is None:
        return await fn()
    try:
        return await paced(pacer, bucket, fn, owner=f"slack-card:{target.turn_id}", priority=True)
    except RateLimited as error:
        raise TransientError(f"{error}; waiting for that budget before trying again") from None


def _team(target: CardTarget) -> str:
    return target.workspace_id or "-"
