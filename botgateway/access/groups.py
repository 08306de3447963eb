"""The groups an asker belongs to, so roles may name Slack user groups and DingTalk departments.

A role's ``members`` may list group ids (``slack:S0ONCALL``, ``dingtalk:dept:42``);
:func:`botgateway.access.policy.decide` matches them against ``Principal.groups``.
Filling that set is a platform lookup, done by the adapter that received the
message through a :class:`GroupResolver` before the gateway sees it. Only the
groups the policy names are looked up (:func:`policy_groups`), answers are
cached (``access.group_cache_s``), and a lookup that fails means "not a member":
access fails closed, the asker keeps whatever their own id grants them, and
the log says what to fix.

This module is the core's side: the contract, the no-op resolver and the cache
both platform resolvers share. The resolvers themselves live in the adapters
(``adapters/slack/usergroups.py``, ``adapters/dingtalk/departments.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import structlog
from cachetools import TLRUCache, TTLCache

from botgateway.access.policy import effective_policy
from botgateway.config.access import AccessConfig
from botgateway.messages import InboundMessage
from botgateway.principal import Principal

__all__ = [
    "DINGTALK_DEPT_PREFIX",
    "NO_GROUPS",
    "SLACK_GROUP_PREFIX",
    "CachedLookup",
    "GroupLookupFailed",
    "GroupResolver",
    "NoGroups",
    "policy_groups",
    "resolve_message",
    "resolve_safely",
]

log = structlog.get_logger(__name__)

SLACK_GROUP_PREFIX = "slack:S"
"""Slack user group ids (subteams) start with ``S``; user ids with ``U`` or ``W``."""
DINGTALK_DEPT_PREFIX = "dingtalk:dept:"
"""A DingTalk department, by its numeric ``dept_id``."""

FAILURE_TTL_S = 30.0
"""How long a failed lookup is remembered as "no members" (at most the full TTL): long enough not to hammer a
platform that refuses, short enough that a fixed scope or permission takes effect within a minute."""

_GLOB = frozenset("*?[")

K = TypeVar("K", bound=Hashable)


class GroupResolver(Protocol):
    """Adds to a principal the groups it is known to belong to."""

    async def resolve(self, principal: Principal) -> Principal:
        """``principal`` with its groups added; unchanged when they cannot be known. Never raises."""
        ...


@dataclass(frozen=True)
class NoGroups:
    """The resolver of a platform whose policy names no groups: every principal stays as it is."""

    async def resolve(self, principal: Principal) -> Principal:
        """``principal``, unchanged."""
        return principal


NO_GROUPS: GroupResolver = NoGroups()
"""Resolves nothing (the adapters' default)."""


def policy_groups(access: AccessConfig | None, prefix: str) -> frozenset[str]:
    """The group ids starting with ``prefix`` (:data:`SLACK_GROUP_PREFIX`, :data:`DINGTALK_DEPT_PREFIX`) that
    some role of the policy lists as a member; ``None`` is the default policy.

    Globs are left out: ``slack:S*`` names no group that could be looked up.
    """
    policy = effective_policy(access)
    return frozenset(
        member
        for role in policy.roles.values()
        for member in role.members
        if member.startswith(prefix) and len(member) > len(prefix) and not _GLOB & set(member)
    )


async def resolve_safely(groups: GroupResolver, principal: Principal) -> Principal:
    """``groups.resolve(principal)``, or ``principal`` unchanged if the resolver breaks its promise not to raise."""
    try:
        return await groups.resolve(principal)
    except Exception as exc:
        # Fail closed: the asker keeps only what their own id grants.
        log.warning("groups.resolver_failed", principal=principal.id, error=type(exc).__name__, detail=str(exc)[:200])
        return principal


async def resolve_message(message: InboundMessage, groups: GroupResolver) -> InboundMessage:
    """``message`` with its asker's groups resolved, on the message and on its tool context alike."""
    if isinstance(groups, NoGroups):
        return message
    principal = await resolve_safely(groups, message.asker)
    if principal == message.principal:
        return message
    ctx = dataclasses.replace(message.ctx, principal=principal)
    return dataclasses.replace(message, ctx=ctx, principal=principal)


class GroupLookupFailed(Exception):
    """A group lookup got no usable answer; raised by a :class:`CachedLookup`'s fetch function."""

    def __init__(self, advice: str, *, reason: str, retry_after_s: float | None = None,
                 once_per: str | None = None) -> None:
        """``advice`` says what to fix in plain words; ``reason`` is a short code (``missing_scope``);
        ``retry_after_s`` replaces the failure TTL (a throttle's ``Retry-After``); ``once_per`` is what the
        warning is logged once per (default: the key looked up), e.g. one warning for a missing app permission
        rather than one per asker."""
        super().__init__(advice)
        self.advice = advice
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.once_per = once_per


@dataclass(frozen=True)
class _Answer:
    members: frozenset[str]
    ttl_s: float


class CachedLookup(Generic[K]):
    """Answers of ``fetch(key)`` (a set of ids) kept for ``ttl_s``, with one call in flight per key.

    A fetch that raises :class:`GroupLookupFailed` (or anything else) answers the empty set, remembered for a
    shorter while (:data:`FAILURE_TTL_S`), and logs one warning per key (or per ``once_per``) and period.
    :meth:`get` never raises. ``clock`` is injectable so tests move time instead of sleeping.
    """

    def __init__(
        self,
        fetch: Callable[[K], Awaitable[frozenset[str]]],
        *,
        ttl_s: float,
        what: str,
        failure_ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 4096,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._failure_ttl_s = min(ttl_s, FAILURE_TTL_S if failure_ttl_s is None else failure_ttl_s)
        self._what = what
        # Per-entry expiry: a success lives ttl_s, a failure only failure_ttl_s (or a throttle's Retry-After).
        self._answers: TLRUCache[K, _Answer] = TLRUCache(
            maxsize=max_entries, ttu=lambda _key, answer, now: now + answer.ttl_s, timer=clock
        )
        self._warned: TTLCache[str, bool] = TTLCache(maxsize=max_entries, ttl=self._failure_ttl_s, timer=clock)
        self._inflight: dict[K, asyncio.Task[frozenset[str]]] = {}

    async def get(self, key: K) -> frozenset[str]:
        """The members for ``key``: cached, shared with a call already in flight, or fetched now."""
        answer = self._answers.get(key)
        if answer is not None:
            return answer.members
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._fetch_and_keep(key), name=f"groups:{self._what}:{key}")
            self._inflight[key] = task
        # A caller that is cancelled must not cancel the lookup the others are waiting for.
        return await asyncio.shield(task)

    async def _fetch_and_keep(self, key: K) -> frozenset[str]:
        try:
            members, ttl_s = await self._fetch(key), self._ttl_s
        except GroupLookupFailed as exc:
            self._warn(key, exc.reason, exc.advice, exc.once_per)
            members, ttl_s = frozenset(), self._failure_ttl_s
            if exc.retry_after_s is not None:  # a throttle said how long to wait: no sooner, and at most the TTL
                ttl_s = min(max(exc.retry_after_s, 1.0), self._ttl_s)
        except Exception as exc:
            self._warn(key, type(exc).__name__, f"unexpected error: {str(exc)[:200]}", None)
            members, ttl_s = frozenset(), self._failure_ttl_s
        finally:
            self._inflight.pop(key, None)
        if ttl_s > 0:
            self._answers[key] = _Answer(members, ttl_s)
        return members

    def _warn(self, key: K, reason: str, advice: str, once_per: str | None) -> None:
        topic = once_per if once_per is not None else str(key)
        if topic in self._warned:
            return
        self._warned[topic] = True
        log.warning("groups.lookup_failed", what=self._what, key=str(key), reason=reason, advice=advice,
                    effect="treated as not a member")
