"""How each Slack answer is delivered: its mode, planned from the budgets, and the bucket its next call draws from.

Each answer's mode is planned from the budgets when it starts (:meth:`AnswerPlanner.plan`):
native while ``chat.startStream`` and ``chat.stopStream`` have calls to spare
beyond what open streams reserved; otherwise edit mode while ``chat.update``
has; otherwise *deferred*: no message until the answer is complete, then one
message (or a few, when long) on the channel's ``chat.postMessage`` budget. So
a spent budget never leaves anyone with nothing, and never delays finals.

:meth:`AnswerPlanner.rate_key` names the bucket (:mod:`adapters.slack.limits`)
of the call the streamer is about to pay for. The sink
(:class:`~adapters.slack.sink.SlackCardSink`) makes the calls, and tells the
planner what each card became (:meth:`AnswerPlanner.became`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

import structlog
from cachetools import LRUCache

from adapters.slack.control import is_control
from adapters.slack.handles import CardKey, card_key
from adapters.slack.limits import Bucket, SlackBuckets
from botgateway.sink import CallPacer, CardOp, CardTarget
from botgateway.snapshot import CardSnapshot

if TYPE_CHECKING:
    from botgateway.config import SlackConfig

__all__ = ["AnswerPlanner", "Mode"]

log = structlog.get_logger(__name__)

Mode: TypeAlias = Literal["native", "edit", "deferred", "done"]
"""How a card's next calls are made; ``done``: its message went out finished, and nothing is left to show."""

_MAX_CARDS = 10_000
"""Cards whose mode is remembered at most; the least recently used (never finalized) are forgotten."""


class AnswerPlanner:
    """The mode of every live Slack card, planned from the budgets (see the module docstring).

    Args:
        config: The ``adapters.slack`` section (``streaming``, ``stream_starts_per_channel``).
        buckets: The buckets each call draws from.
        pacer: Tells what the budgets have to spare (None: plans ignore the budgets).
        native_available: False for a workspace where auto mode learned that native streaming is not available.
    """

    def __init__(self, config: SlackConfig, buckets: SlackBuckets, pacer: CallPacer | None,
                 native_available: Callable[[str], bool]) -> None:
        self._config = config
        self._buckets = buckets
        self._pacer = pacer
        self._native_available = native_available
        # Mode per live card, so rate_key names the bucket the next call really uses.
        self._modes: LRUCache[CardKey, Mode] = LRUCache(_MAX_CARDS)
        # Cards taken over whose message may still be a dead process's stream: stopped before their first edit.
        self._taken_over: LRUCache[CardKey, bool] = LRUCache(_MAX_CARDS)

    def rate_key(self, op: CardOp, target: CardTarget) -> Bucket:
        """The bucket of the call ``op`` makes next for ``target``.

        Creating a card: a new message in the channel (``chat.postMessage``, or
        ``chat.startStream`` when stream starts count per channel), else
        ``chat.startStream`` per workspace; fallbacks are channel messages too.
        Updates: ``chat.update`` or stream appends per workspace, shared by all
        cards. Finalizing a recovered Stop control: ``chat.delete`` per
        workspace. A deferred answer makes no call until its final, one
        ``chat.postMessage``; an answer that went out finished makes none.
        """
        if op == "finalize" and is_control(target):
            return self._buckets.delete_bucket(target)  # a recovered Stop control is deleted
        mode = self.create_mode(target) if op == "create" else self._modes.get(card_key(target))
        if op == "create" and mode == "native" and not self._config.stream_starts_per_channel:
            return self._buckets.start_bucket(target)
        if (op in ("create", "update") and mode == "deferred") or (op in ("update", "finalize") and mode == "done"):
            return self._buckets.no_call_bucket(target)
        if op in ("create", "fallback") or mode == "deferred":
            return self._buckets.post_bucket(target)
        if (mode or self.initial_mode(target)) == "native":
            return self._buckets.stop_bucket(target) if op == "finalize" else self._buckets.stream_bucket(target)
        return self._buckets.update_bucket(target)

    def create_mode(self, target: CardTarget) -> Mode:
        """The mode ``rate_key("create")`` budgets for: the card's mode so far, else the plan made now (and kept).

        The snapshot is not known yet, so a queued card (which never streams) is
        budgeted as a stream on its first try; :meth:`~adapters.slack.sink.SlackCardSink.create`
        then has the pacer pay for the placeholder, and the card's retries and later parts use what it became.
        """
        key = card_key(target)
        mode = self._modes.get(key)
        if mode is None:
            mode = self._modes[key] = self.plan(target)
        elif mode == "native" and not self.may_start(target):
            # The workspace's stream window was spent since the plan: the card is an edited message, planned so
            # before its final is reserved.
            mode = self._modes[key] = self._edit_or_deferred(target)
        return mode

    def plan(self, target: CardTarget) -> Mode:
        """The mode a new answer starts in, from the budgets as they are now (see the module docstring)."""
        mode = self.initial_mode(target)
        if self._pacer is None:
            return mode
        if mode == "native" and (self._spare(self._buckets.start_bucket(target)) < 1
                                 or self._spare(self._buckets.stop_bucket(target)) < 1):
            mode = "edit"  # no stream could start now, or its stop would take a reserved call
        return self._edit_or_deferred(target) if mode == "edit" else mode

    def _edit_or_deferred(self, target: CardTarget) -> Mode:
        if self._pacer is not None and self._spare(self._buckets.update_bucket(target)) < 1:
            log.info("slack.answer_deferred", team=target.workspace_id, reason="chat.update budget reserved for finals")
            return "deferred"
        return "edit"

    def take_over(self, target: CardTarget) -> None:
        """``target``'s card is a message another process made (a resumed turn's): the answer comes complete, in a
        new message on the channel's budget, and the message left behind is deleted then.

        Slack still counts the dead process's ``chat.update`` and stream calls of the last minute, which this
        process cannot know: a resumed answer edited live would spend a window that may be gone, and be throttled
        where it matters most. A new message and a ``chat.delete`` need only the channel's slot (the burst the dead
        process spent is seconds old) and the delete tier; nothing of the left message stays live.
        """
        self._modes[card_key(target)] = "deferred"
        self._taken_over[card_key(target)] = True

    def left_behind(self, target: CardTarget) -> bool:
        """Whether ``target``'s card was taken over (:meth:`take_over`) and not yet told so: True once, when its
        first update finds the message a dead process left."""
        return self._taken_over.pop(card_key(target), False)

    def replan(self, op: CardOp, target: CardTarget) -> bool:
        """The call planned for ``op`` cannot be had soon: the answer takes the next strategy down.

        The plan read the budgets as this process last saw them, a moment old in a fleet: another replica may
        have spent the workspace's window meanwhile, or promised its calls to its own cards' finals. A stream
        whose ``chat.startStream`` cannot start soon, or whose ``chat.stopStream`` cannot be promised, starts as
        an edited message instead; an edited message whose final ``chat.update`` cannot be promised is deferred
        (one message once the answer is complete, on the channel's ``chat.postMessage`` budget). A deferred
        answer has no other way (:class:`~botgateway.sink.Replanning`).
        """
        key = card_key(target)
        mode = self._modes.get(key)
        if mode == "native" and op == "create" and self._config.stream_starts_per_channel:
            return False  # the channel's budget is what it waits for, and an edited message would wait for it too
        if mode == "native" and op in ("create", "finalize"):
            new: Mode = self._edit_or_deferred(target)
        elif mode == "edit" and op == "finalize":
            new = "deferred"
        else:
            return False
        self._modes[key] = new
        log.info("slack.answer_replanned", team=target.workspace_id, mode=new, op=op,
                 reason="the workspace's budget for that call is spent or promised to other answers")
        return True

    def became(self, target: CardTarget, mode: Mode) -> None:
        """``target``'s card is made in ``mode`` now (what its message became, whatever the plan said)."""
        self._modes[card_key(target)] = mode

    def _spare(self, bucket: Bucket) -> float:
        assert self._pacer is not None
        return self._pacer.spare(*bucket)

    def initial_mode(self, target: CardTarget, snapshot: CardSnapshot | None = None) -> Mode:
        """The mode the configuration and ``snapshot`` allow ``target``'s card, budgets aside."""
        mode = self._config.streaming
        if mode == "edit" or not target.thread_id:
            return "edit"  # a stream must be a reply in a thread
        if snapshot is not None and snapshot.status == "queued":
            return "edit"  # the queue note must disappear later; a stream cannot take text back
        if snapshot is not None and snapshot.preamble:
            return "edit"  # a preamble (an alert's status) changes later; a stream cannot take text back
        if mode == "auto" and not self._native_available(target.workspace_id):
            return "edit"
        return "native"

    def may_start(self, target: CardTarget) -> bool:
        """Whether a stream can start now when the sink pays its workspace's ``chat.startStream`` window itself: the
        channel slot is taken, and an edited message uses it at once instead of holding it while the window slides."""
        if not self._config.stream_starts_per_channel or self._pacer is None:
            return True
        return self._spare(self._buckets.start_bucket(target)) >= 1
