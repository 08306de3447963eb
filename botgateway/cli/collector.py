"""The garbage collector of a serving process: start-up's objects frozen, young collections rarer.

CPython's collector walks every tracked container of the generations it
collects, in the event loop's thread, with the loop stopped meanwhile. With
the defaults (a young collection every 700 net allocations, a full one every
ten middle ones once the old generation has grown by a quarter), a process
streaming a thousand answers spends about a third of its CPU there, and each
full collection stops every answer for half a second: the loop lag that held
the answers' final cards back. Nearly all of what a turn allocates is freed by
reference counting when the turn ends; the collector only has cycles to find.

So, once start-up is over, :func:`settle_after_startup`:

- collects once and freezes what is left (modules, classes, the runtime: they
  live as long as the process), so no later collection walks them again;
- makes young collections rarer (:data:`THRESHOLDS`), so a burst of turns is
  not interrupted every few hundred allocations and fewer short-lived objects
  are promoted to be walked again by the older generations.

Cycles are still found: a young collection runs every
``THRESHOLDS[0]`` net allocations (a fraction of a second under load) and a
full one whenever the old generation has grown enough, only less often.
"""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "settle_after_startup"]

THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` of a serving process: young, middle and old generation (CPython's are 700, 10, 10)."""


def settle_after_startup() -> None:
    """Collect, freeze what start-up built, and set :data:`THRESHOLDS`; once, when the process starts serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
