"""Rate budgets for platform calls: the fair line, the shape of a limit, the limits learned from throttles, and the
ledgers behind them.

The ledgers live in memory, or in Redis for a fleet.
"""

from __future__ import annotations

from botgateway.budget.learned import Estimate, Learning
from botgateway.budget.least_served import LeastServed
from botgateway.budget.ledgers.base import Verdict
from botgateway.budget.ledgers.leases import LEASE_MOST
from botgateway.budget.ledgers.local import LocalLedger
from botgateway.budget.ledgers.redis import FLIGHT_S, RedisLedger
from botgateway.budget.ledgers.shared import SharedLedger
from botgateway.budget.rate_budget import RateBudget, RateLimit, WouldWait

__all__ = [
    "FLIGHT_S",
    "LEASE_MOST",
    "Estimate",
    "Learning",
    "LeastServed",
    "LocalLedger",
    "RateBudget",
    "RateLimit",
    "RedisLedger",
    "SharedLedger",
    "Verdict",
    "WouldWait",
]
