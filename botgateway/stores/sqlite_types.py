"""What the SQLite store hands its per-topic modules (claims, audit, limits, usage, votes): its transaction and its
reads, as callables, so those modules know nothing of its connections."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiosqlite

__all__ = ["Fetch", "Transaction"]

Transaction = Callable[[Callable[[aiosqlite.Connection], Awaitable[Any]]], Awaitable[Any]]
"""Runs its argument in one write transaction (the store's, with its periodic sweep) and returns its result."""
Fetch = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]
"""Runs one read statement beside the writes
(:meth:`~botgateway.stores.sqlite_connection.SqliteConnection.fetchall`)."""
