"""Reads started at once that fail as they would one after another: the earliest failure in call order is raised.

A source reads a resource's follow-ups (listeners and targets, policy and ACL,
every zone's records) concurrently; which read failed first in time is chance,
so the failure reported is the first in call order, after every read finished
(no task is left with an unretrieved error).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

__all__ = ["both", "raise_or", "settled"]

A = TypeVar("A")
B = TypeVar("B")
V = TypeVar("V")


def raise_or(result: V | BaseException) -> V:
    """A ``gather(..., return_exceptions=True)`` result, or its exception raised."""
    if isinstance(result, BaseException):
        raise result
    return result


def settled(results: Sequence[V | BaseException]) -> list[V]:
    """``gather(..., return_exceptions=True)`` results, or the first failure in call order raised."""
    return [raise_or(result) for result in results]


async def both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Both awaited at once; the first's failure wins over the second's."""
    a, b = await asyncio.gather(first, second, return_exceptions=True)
    return raise_or(a), raise_or(b)
