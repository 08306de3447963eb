"""Who goes next among owners waiting in line: the least served first, and in turn among equals.

The budget's live updates are served this way (a card that shows nothing yet
before one showing its third update). Owners are grouped by how many times they
were served, so finding the next is a look at the lowest group, not a scan of
every owner waiting: a line of hundreds of cards is served thousands of times
a second.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LeastServed"]


class LeastServed:
    """Waiting owners by times served (mutable; owned by its line)."""

    def __init__(self) -> None:
        self._groups: dict[int, OrderedDict[str, None]] = {}
        self._level: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._level)

    def __contains__(self, owner: object) -> bool:
        return owner in self._level

    def put(self, owner: str, served: int) -> None:
        """``owner`` waits, served ``served`` times so far: it goes after the others served as often."""
        self.drop(owner)
        self._groups.setdefault(served, OrderedDict())[owner] = None
        self._level[owner] = served

    def drop(self, owner: str) -> None:
        """``owner`` no longer waits."""
        level = self._level.pop(owner, None)
        if level is None:
            return
        group = self._groups[level]
        del group[owner]
        if not group:
            del self._groups[level]

    def first(self) -> str | None:
        """The owner to serve next (None: nobody waits)."""
        if not self._groups:
            return None
        return next(iter(self._groups[min(self._groups)]))
