"""Each Slack channel's line of answers waiting to make their first message, in the order the questions came.

A channel takes about one new message a second. Thirty questions in one
channel are therefore a queue, whatever the workspace's budgets allow: the
k-th answer cannot be complete before the k-th message slot. The line hands
the slots out in arrival order (the order of the questions' ``ts``, Slack's own: turns that start a moment apart
may line up the other way round): only the card at the head goes to the
channel's budget for its slot, and the next one moves up once the head's
call is being made (:meth:`ChannelLines.made`) or the head needs no slot any
more (:meth:`Place.leave`). The card at the head makes its message with
whatever it shows by then: an answer that is ready goes out finished, in one
message, and one still being written starts its live card, which is finished
later on the workspace's budgets, no channel slot needed.

In a fleet (``fleet``: :class:`~botgateway.sink.FleetLines`) every place also
joins its channel's line in Redis, ordered by its question's time, and a local
head goes for its slot only once it heads the fleet's line too: the answers of
one channel keep the order their questions were asked in whichever replica runs
them, and no replica takes a slot another's answer is waiting for. A question
holds its place in the fleet's line from the moment its replica takes it
(:meth:`ChannelLines.announce`): in a burst a replica may take a second to
start its turns, and the other replica's heads would not know of them meanwhile.

Calls that do not open an answer (a fallback, a deferred answer's final) do
not line up: they draw from the channel's budget directly. A Stop control waits
until the line is empty (:meth:`ChannelLines.idle`): it never takes a queued
answer's slot.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import uuid

from adapters.slack.handles import CardKey, card_key
from botgateway.sink import CardTarget, FleetLines

__all__ = ["ChannelLines", "Place"]

_Channel = tuple[str, str]
"""Workspace and channel of a line."""

_Order = tuple[int, int, int, int]
"""Where a place goes in its line: its question's ``ts`` (seconds, microseconds; a card without one after every
card with one), then the order of lining up."""


POLL_S = 0.05
"""How often a local head that waits for the fleet's line asks Redis again (another replica's answer leaving it
tells nobody here)."""

SETTLE_S = 0.25
"""In a fleet, a head goes only once its question is this old while other answers wait in its channel: a question
asked a moment before it may not have been announced yet (its event on its way to another replica). An answer alone
in its channel goes at once."""


def _parsed(ts: str) -> tuple[int, int] | None:
    """A Slack ``ts`` as (seconds, microseconds); None when it is not one."""
    seconds, _, fraction = ts.partition(".")
    if not seconds.isdigit() or not (fraction.isdigit() or not fraction):
        return None
    return int(seconds), int(fraction.ljust(6, "0")[:6])


def _order(target: CardTarget, number: int) -> _Order:
    parsed = _parsed(_question(target))
    if parsed is None:
        return 1, 0, 0, number
    return 0, *parsed, number


def _question(target: CardTarget) -> str:
    """The ``ts`` of the question ``target`` answers (empty when it has none)."""
    return str(target.extra.get("ts") or "")


def _announcement(ts: str) -> str:
    """The fleet's name of a question's announcement in its channel's line."""
    return f"ask:{ts}"


def _unix(order: _Order, now: float) -> float:
    """The fleet's order of a place: its question's ``ts`` (unix time), or ``now`` without one."""
    return now if order[0] else order[1] + order[2] / 1_000_000


class Place:
    """One card's place in its channel's line (a :class:`~botgateway.sink.LinePlace`)."""

    def __init__(self, lines: ChannelLines, channel: _Channel, card: CardKey, order: _Order, question: str) -> None:
        self._lines = lines
        self.channel = channel
        """The line's workspace and channel."""
        self.question = question
        """The ``ts`` of the question its card answers (empty without one)."""
        self.card = card
        """The card holding the place."""
        self.order = order
        """Where it goes in the line (its question's ``ts``, then the order of lining up)."""
        self.head = asyncio.Event()
        """Set once the place is the first of its line."""
        self.left = False
        """True once the place was given up."""
        self.member = f"{card[-1] if card else ''}:{uuid.uuid4().hex[:12]}"
        """Its name in the fleet's line (unique across the fleet)."""
        self.joined = False
        """Whether it joined the fleet's line."""
        self.fleet_ahead = 0
        """Answers ahead of it in the fleet's line, as Redis last said."""
        self.gone = asyncio.Event()
        """Set once the place was given up (ends a wait for the fleet's line)."""
        self.going = False
        """True once its turn came: it goes for its slot, and no place lined up later goes ahead of it."""

    async def turn(self) -> None:
        """Wait until this card is the first of its channel's line, the fleet's too (at once when it is, or left)."""
        await self._lines.join(self)  # at once, head or not: the fleet orders the places it knows of
        while not self.left:
            await self.head.wait()
            if await self._lines.fleet_turn(self):
                break
        self.going = True

    def leave(self) -> None:
        """Give the place up; the next card of the line moves up. Idempotent."""
        self._lines.leave(self)

    @property
    def ahead(self) -> int:
        """Answers ahead of this one in its channel's line (0 at the head or once left), the fleet's included."""
        return max(self._lines.ahead(self), 0 if self.left else self.fleet_ahead)


class ChannelLines:
    """Every channel's line of answers waiting for their first message (mutable; one per sink).

    ``fleet``: the fleet's lines in Redis (none: one process).
    """

    def __init__(self, fleet: FleetLines | None = None) -> None:
        self._fleet = fleet
        self._lines: dict[_Channel, list[Place]] = {}  # each sorted by order, the head first
        self._emptied: dict[_Channel, asyncio.Event] = {}  # set when the channel's line empties
        self._by_card: dict[CardKey, Place] = {}
        self._numbers = itertools.count()

    def line_up(self, target: CardTarget) -> Place:
        """A place in the line of ``target``'s channel, behind every question asked before it but never ahead of a
        head whose turn came, which may be making its call already (a card that lines up again keeps its place).
        A head still waiting (for the fleet's line) steps back behind a question asked before it."""
        card = card_key(target)
        held = self._by_card.get(card)
        if held is not None and not held.left:
            return held
        channel = (target.workspace_id, target.chat_id)
        line = self._lines.setdefault(channel, [])
        place = Place(self, channel, card, _order(target, next(self._numbers)), _question(target))
        at = bisect.bisect_right([p.order for p in line], place.order)
        if line and line[0].going:
            at = max(at, 1)
        line.insert(at, place)
        self._by_card[card] = place
        if at == 0:
            if len(line) > 1:
                line[1].head.clear()  # stepped back: it waits for its turn again
            place.head.set()
        return place

    async def join(self, place: Place) -> None:
        """``place`` joins its channel's line in the fleet (once; nothing without a fleet)."""
        if self._fleet is None or place.joined or place.left:
            return
        place.joined = True
        announced = _announcement(place.question) if place.question else ""
        await self._fleet.join(_line(place.channel), place.member, _unix(place.order, self._fleet.now()),
                               announced=announced)
        self._left_meanwhile(place)

    def announce(self, workspace_id: str, chat_id: str, ts: str) -> None:
        """The question ``ts`` of a channel was taken here: in a fleet it holds its place in the channel's line from
        now on, before its turn starts and its card lines up (whose place takes it over), so that a question asked
        after it on another replica does not go first meanwhile (written in the background: the turn starts
        meanwhile). Nothing without a fleet or a ``ts``."""
        parsed = _parsed(ts)
        if self._fleet is None or parsed is None:
            return
        self._fleet.announce(_line((workspace_id, chat_id)), _announcement(ts), parsed[0] + parsed[1] / 1_000_000)

    def withdraw(self, workspace_id: str, chat_id: str, ts: str) -> None:
        """The question ``ts`` announced makes no card after all (refused, a stop word, a failure): its
        announcement leaves the channel's line."""
        if self._fleet is not None and ts:
            self._fleet.leave(_line((workspace_id, chat_id)), _announcement(ts))

    async def fleet_turn(self, place: Place) -> bool:
        """Wait until ``place``, the head of its line here, heads its channel's line in the fleet too, keeping this
        process's other places of the line in it meanwhile (at once without a fleet, or once left). False: it
        stepped back meanwhile (a question asked before it lined up here)."""
        fleet = self._fleet
        if fleet is None:
            return True
        line = _line(place.channel)
        asked = _unix(place.order, fleet.now())
        while not place.left:
            if not place.head.is_set():
                return False
            others = [p.member for p in self._lines.get(place.channel, ()) if p is not place and p.joined]
            first, ahead, size = await fleet.first(line, place.member, others)
            place.fleet_ahead = ahead
            settled = size <= 1 or fleet.now() - asked >= SETTLE_S
            if first and settled and place.head.is_set():
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(place.gone.wait(), POLL_S)
        return True

    def _left_meanwhile(self, place: Place) -> None:
        """A place that left while it was joining the fleet's line leaves it again: its leave may have been
        written before its join."""
        if place.left and self._fleet is not None:
            self._fleet.leave(_line(place.channel), place.member)

    def made(self, target: CardTarget) -> None:
        """The first message of ``target``'s card is being made (its slot was granted): the next card moves up."""
        place = self._by_card.get(card_key(target))
        if place is not None:
            place.leave()

    def leave(self, place: Place) -> None:
        """Take ``place`` out of its line; when it was the head, the next place becomes the head."""
        if place.left:
            return
        place.left = True
        place.head.set()  # whoever waits on it stops waiting
        place.gone.set()
        if self._fleet is not None and place.joined:
            self._fleet.leave(_line(place.channel), place.member)
        if self._by_card.get(place.card) is place:
            del self._by_card[place.card]
        line = self._lines.get(place.channel)
        if line is None or place not in line:
            return
        was_head = line[0] is place
        line.remove(place)
        if not line:
            del self._lines[place.channel]
            emptied = self._emptied.pop(place.channel, None)
            if emptied is not None:
                emptied.set()
        elif was_head:
            line[0].head.set()

    def ahead(self, place: Place) -> int:
        """Places ahead of ``place`` in its line."""
        line = self._lines.get(place.channel)
        if place.left or line is None or place not in line:
            return 0
        return line.index(place)

    async def idle(self, target: CardTarget) -> None:
        """Return once no answer of ``target``'s channel waits for its first message, on any replica (at once when
        none does)."""
        channel = (target.workspace_id, target.chat_id)
        while True:
            while channel in self._lines:
                await self._emptied.setdefault(channel, asyncio.Event()).wait()
            if self._fleet is None or not await self._fleet.size(_line(channel)):
                return
            await asyncio.sleep(POLL_S)  # another replica's answers: their leaving tells nobody here

    def waiting(self, workspace_id: str, chat_id: str) -> int:
        """Answers in the line of one channel now, the head included."""
        return len(self._lines.get((workspace_id, chat_id), ()))


def _line(channel: _Channel) -> str:
    """The fleet's name of a channel's line."""
    return f"{channel[0]}:{channel[1]}"
