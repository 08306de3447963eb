"""The console's Status page: the adapters, the Store, the rate budgets in use, the open cards and the replicas.

Read at request time from the running parts; every part that is missing (no
readiness with ``http`` off, no budget yet) is simply left out of the answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from adapters.web.console_reports import ReportStore
from botgateway.budget import RateBudget, RateLimit
from botgateway.http.probes import Pingable, Readiness
from botgateway.stores.base import InstanceStore, OpenCardStore

__all__ = ["STATUS_TIMEOUT_S", "ConsoleStore", "StatusParts", "console_status"]

STATUS_TIMEOUT_S = 3.0
"""Longest wait for the Store's answers: a page that hangs says less than one that says the Store is slow."""


class ConsoleStore(Pingable, OpenCardStore, InstanceStore, ReportStore, Protocol):
    """The part of the Store the console reads: its ping, open cards and live instances (the Status page), and the
    records of the Audit, Usage and Feedback tables."""


@dataclass(frozen=True)
class StatusParts:
    """What the Status page reads, each found when the page is asked for (they exist only once the gateway runs)."""

    store: ConsoleStore
    """The Store: its ping, open cards and live instances, and the records of the tables."""
    readiness: Callable[[], Readiness | None] = lambda: None
    """The readiness checks (the adapters' connections among them)."""
    budget: Callable[[], RateBudget | None] = lambda: None
    """The process's rate budgets."""
    instance_id: Callable[[], str] = lambda: ""
    """This process's instance id (marked among the replicas)."""


def _shape(limit: RateLimit) -> str:
    if limit.windowed:
        return f"{limit.burst}/{limit.window_s:g}s"
    shape = f"{round(limit.rate_per_s, 3):g}/s burst {limit.burst}"
    if limit.arrivals_per_s > 0:  # what the platform counts, on arrival
        shape += f", {limit.arrivals_per_s}/{limit.arrival_window_s:g}s arriving"
    return shape


def _budgets(budget: RateBudget | None) -> list[dict[str, Any]]:
    """A row per rate key used lately: its configured limit (``limit``), the limit learned from the platform's
    throttles (``learned``), the throttles heard, and how its calls are going."""
    if budget is None:
        return []
    rows = []
    for estimate in budget.estimates():
        key, limit = estimate.key, estimate.configured
        rows.append({
            "key": key, "limit": _shape(limit), "learned": _shape(estimate.learned), "throttles": estimate.throttles,
            "granted": budget.granted(key), "waiting": budget.waiting(key), "reserved": budget.reserved(key),
            "spare": round(budget.spare(key, limit), 2), "paused_s": round(budget.paused_for(key), 1),
        })
    return rows


async def _store_part(store: ConsoleStore) -> tuple[str, list[dict[str, Any]], list[str]]:
    try:
        async with asyncio.timeout(STATUS_TIMEOUT_S):
            await store.ping()
            cards = await store.open_cards()
            live = await store.live_instances()
    except Exception as exc:  # the page says the Store is down; the detail (hosts) stays out of it
        return f"unreachable ({type(exc).__name__})", [], []
    now = time.time()
    rows = [{"platform": card.platform, "turn_id": card.turn_id, "owner": card.owner,
             "age_s": round(now - card.created_at, 1)} for card in cards]
    return "ok", rows, sorted(live)


async def console_status(parts: StatusParts) -> dict[str, Any]:
    """The Status page's data: ``checks`` (readiness, adapters among them), ``store``, ``budgets``, ``open_cards``,
    ``replicas`` and ``instance``."""
    readiness = parts.readiness()
    checks = dict((await readiness.report()).checks) if readiness is not None else {}
    store, cards, live = await _store_part(parts.store)
    return {
        "checks": checks,
        "store": store,
        "budgets": _budgets(parts.budget()),
        "open_cards": cards,
        "replicas": live,
        "instance": parts.instance_id(),
    }
