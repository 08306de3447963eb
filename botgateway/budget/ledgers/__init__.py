"""The accounts behind the rate budget's fair queue: in memory for one process, in Redis for a fleet.

See :mod:`botgateway.budget.ledgers.base` for the seam; the implementations are
imported from their modules (the Redis one needs ``redis`` only when chosen).
"""

from __future__ import annotations

from botgateway.budget.ledgers.base import LEARN_BACK, PACED_SHARE, SLICES, Ledger, Verdict

__all__ = ["LEARN_BACK", "PACED_SHARE", "SLICES", "Ledger", "Verdict"]
