"""The web's :class:`~botgateway.sink.CardSink`: no platform to call, only each turn's newest snapshot, for watchers.

The API's and the console's cards live in the browser: this sink keeps the
newest snapshot of each turn on a :class:`CardBoard`, whose watchers
(``GET /v1/turns/{id}/card``, ``POST /v1/turns`` with ``snapshots``) wake on
each change and read the newest snapshot only, so a slow watcher skips versions
instead of queueing them. A finished card is kept :data:`KEEP_FINAL_S` more
(a watcher that comes late still sees it), and all the cards together are
bounded (:data:`MAX_BOARDS` cards, :data:`MAX_TOTAL_CHARS` characters): past
either, the least recently changed card goes first. A dropped board tells its
watchers (:attr:`CardBoard.dropped`), so none waits for a change that cannot
come. It makes no platform calls, so its rate budget is a large no-op one (as
DingTalk's local replies); the card's buffer policy still paces the updates.
A turn's pictures go on its :class:`~adapters.web.artifact_shelf.ArtifactShelf`
(:meth:`WebSink.ship_artifact`), and the card shows each by the URL the
console loads it from, for the turn's asker only.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from adapters.web.artifact_shelf import CONSOLE_PICTURES, ArtifactShelf
from botgateway.artifacts import Artifact, ArtifactPlacement
from botgateway.budget import RateLimit
from botgateway.sink import CardHandle, CardOp, CardTarget, PermanentError
from botgateway.snapshot import CardSnapshot

__all__ = ["KEEP_FINAL_S", "MAX_BOARDS", "MAX_TOTAL_CHARS", "NO_CALL", "PLATFORM", "CardBoard", "WebSink",
           "snapshot_chars"]

PLATFORM = "web"
"""The platform name of the web's cards."""

NO_CALL = RateLimit(rate_per_s=1000.0, burst=1000)
"""The budget of calls that reach no platform: never the bottleneck."""

MAX_BOARDS = 2000
"""Cards kept at most (running ones and recently finished ones)."""

MAX_TOTAL_CHARS = 20_000_000
"""Characters all the kept cards may hold together (about 80 MB at worst): a few long answers, not 2000 of them."""

KEEP_FINAL_S = 60.0
"""How long a finished card is kept for late watchers."""


def snapshot_chars(snapshot: CardSnapshot) -> int:
    """About how many characters ``snapshot`` holds (its texts, blocks and approvals)."""
    texts = (snapshot.answer, snapshot.thought, snapshot.error, snapshot.footer, snapshot.preamble)
    return (sum(len(text) for text in texts) + sum(len(repr(block)) for block in snapshot.blocks)
            + sum(len(repr(prompt)) for prompt in snapshot.approvals))


class CardBoard:
    """One turn's newest snapshot, and a wake-up for whoever watches it change."""

    def __init__(self, snapshot: CardSnapshot) -> None:
        self.snapshot = snapshot
        """The newest snapshot."""
        self.version = 1
        """Bumped at each change."""
        self.dropped = False
        """Set once the sink no longer keeps the board: no change will come (its watchers end)."""
        self._changed = asyncio.Event()

    @property
    def chars(self) -> int:
        """The characters its snapshot holds."""
        return snapshot_chars(self.snapshot)

    def put(self, snapshot: CardSnapshot) -> None:
        """Show ``snapshot`` (an older one than shown is ignored) and wake the watchers."""
        if snapshot.seq < self.snapshot.seq and not snapshot.final:
            return
        self.snapshot = snapshot
        self.version += 1
        self._wake()

    def drop(self) -> None:
        """The sink let the board go: wake the watchers, for good."""
        self.dropped = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed_since(self, version: int) -> None:
        """Return once the board is past ``version`` or dropped (at once when it already is)."""
        while self.version == version and not self.dropped:
            await self._changed.wait()


class WebSink:
    """A :class:`~botgateway.sink.CardSink` that keeps each turn's newest snapshot on a :class:`CardBoard`, and an
    :class:`~botgateway.sink.ArtifactSink` that keeps its pictures on a shelf."""

    platform = PLATFORM
    max_chars = 200_000
    """A browser scrolls: one card holds any answer."""

    def __init__(
        self, *, max_boards: int = MAX_BOARDS, max_total_chars: int = MAX_TOTAL_CHARS,
        keep_final_s: float = KEEP_FINAL_S, clock: Callable[[], float] = time.monotonic,
        shelf: ArtifactShelf | None = None,
    ) -> None:
        """``shelf``: where the turns' pictures are kept for the console and the API (a new one by default)."""
        self.shelf = shelf if shelf is not None else ArtifactShelf()
        """The turns' pictures, served to their askers."""
        self._boards: OrderedDict[str, CardBoard] = OrderedDict()  # least recently changed first
        self._sizes: dict[str, int] = {}
        self._total = 0
        self._finished: deque[tuple[float, str, CardBoard]] = deque()  # in the order they finished
        self._max_boards = max_boards
        self._max_total = max_total_chars
        self._keep_final_s = keep_final_s
        self._clock = clock
        self._added = asyncio.Event()
        self._ids = itertools.count(1)

    def rate_key(self, op: CardOp, target: CardTarget) -> tuple[str, RateLimit]:
        """One no-op budget: nothing leaves the process."""
        return f"web:{op}", NO_CALL

    def board(self, turn_id: str) -> CardBoard | None:
        """The board of ``turn_id``'s card, while it is kept."""
        self._expire()
        return self._boards.get(turn_id)

    async def wait_board(self, turn_id: str) -> CardBoard:
        """The board of ``turn_id``'s card, once the turn opened it (a queued turn opens it when it starts)."""
        while (board := self.board(turn_id)) is None:
            await self._added.wait()
        return board

    @property
    def kept_chars(self) -> int:
        """The characters the kept cards hold together."""
        return self._total

    def __len__(self) -> int:
        return len(self._boards)

    async def create(self, target: CardTarget, snapshot: CardSnapshot) -> CardHandle:
        """Start the turn's board."""
        card_id = target.turn_id or f"note-{next(self._ids)}"
        self._show(card_id, snapshot)
        return CardHandle(card_id=card_id, target=target)

    async def update(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show ``snapshot`` on the turn's board."""
        self._show(handle.card_id, snapshot)
        return handle

    async def finalize(self, handle: CardHandle, snapshot: CardSnapshot) -> CardHandle:
        """Show the final ``snapshot`` (also for a card a crashed process left open: its board is simply new)."""
        self._show(handle.card_id, snapshot)
        return handle

    async def fallback(self, target: CardTarget, snapshot: CardSnapshot) -> None:
        """A note or an undeliverable final: shown on the turn's board when it has one."""
        self._show(target.turn_id or f"note-{next(self._ids)}", snapshot)

    async def ship_artifact(self, target: CardTarget, artifact: Artifact, handle: CardHandle | None) -> ArtifactPlacement:
        """Keep ``artifact`` for the turn's asker; the card shows it by the URL the console loads it from (an
        :class:`~botgateway.sink.ArtifactSink`). Nothing leaves the process: no budget is drawn."""
        if not self.shelf.keep(artifact, target.user_id):
            raise PermanentError("the picture is too large to keep")
        return ArtifactPlacement(embed=f"{CONSOLE_PICTURES}{artifact.ref}.png")

    def _show(self, card_id: str, snapshot: CardSnapshot) -> None:
        board = self._boards.get(card_id)
        if board is None:
            board = self._boards[card_id] = CardBoard(snapshot)
            added, self._added = self._added, asyncio.Event()
            added.set()
        else:
            board.put(snapshot)
            self._boards.move_to_end(card_id)
        size = board.chars
        self._total += size - self._sizes.get(card_id, 0)
        self._sizes[card_id] = size
        if board.snapshot.final:
            self._finished.append((self._clock() + self._keep_final_s, card_id, board))
        self._expire()
        while len(self._boards) > self._max_boards or (self._total > self._max_total and len(self._boards) > 1):
            self._drop(next(iter(self._boards)))

    def _expire(self) -> None:
        """Drop the finished boards kept long enough."""
        now = self._clock()
        while self._finished and self._finished[0][0] <= now:
            _, card_id, board = self._finished.popleft()
            if self._boards.get(card_id) is board and board.snapshot.final:
                self._drop(card_id)

    def _drop(self, card_id: str) -> None:
        board = self._boards.pop(card_id)
        self._total -= self._sizes.pop(card_id, 0)
        board.drop()
