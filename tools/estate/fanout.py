"""Ask every source at once: each (provider, account, region) × kind listing in parallel, within scopes, cached.

A lookup over the whole estate is many listings: every kind at every target
of every provider. :class:`Estate` runs them concurrently, each under a
timeout, and keeps each listing for its source's cache TTL with the time it
was fetched. Identical listings asked at once are fetched once (a burst of
questions after a cold start costs each API one call, not one per question).
The asker's scopes are applied before any call: a target no scope covers is
never asked, and every resource found is shown only if a scope covers its
account, region and tags. A source that fails or times out does not fail the
lookup: it becomes a :class:`Failure` the answer names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import structlog

from botgateway.grant import Scope
from botgateway.tooling import Source, TTLCache
from tools.estate.resource import KINDS, Change, Resource, kinds_label
from tools.estate.source import ChangeQuery, EstateSource, Listing, SourceError, Target
from tools.providers.scope import allows_target, shows, view_of
from tools.server_record import merge_sources, provider_label

__all__ = ["Estate", "EstateView", "Failure", "SourceSettings"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Failure:
    """One listing (or trail) that could not be read."""

    provider: str
    """Provider key."""
    account: str
    """Account label (kube context)."""
    region: str
    """Region or namespace; empty for global services."""
    what: str
    """What was being read ("databases", "the audit trail")."""
    kind: str
    """The class of failure (:data:`~tools.estate.source.FailureKind`)."""
    reason: str
    """Short, secret-free reason, with the fix when known."""

    def describe(self) -> str:
        """"AWS prod/us-east-1 (databases): permission denied: needs rds:DescribeDBInstances"."""
        where = "/".join(p for p in (self.account, self.region) if p)
        return f"{provider_label(self.provider)}{' ' + where if where else ''} ({self.what}): {self.reason}"


@dataclass(frozen=True)
class EstateView:
    """What a fan-out found: the resources the asker may see, and what could not be read."""

    resources: tuple[Resource, ...] = ()
    """Every resource found that the scopes show, in provider then kind order."""
    failures: tuple[Failure, ...] = ()
    """Listings that failed; the others still answered."""
    sources: tuple[Source, ...] = ()
    """Provenance: one per (provider, account, region, API) that answered, with its fetch time."""
    cut: tuple[str, ...] = ()
    """Listings stopped at their bound ("AWS prod/us-east-1 databases"): more exist than were read."""
    scoped: bool = False
    """The asker's scopes narrowed what was read or shown."""
    asked: tuple[str, ...] = ()
    """Provider keys asked."""


@dataclass(frozen=True)
class SourceSettings:
    """How the fan-out treats one source."""

    cache_ttl_s: float = 60.0
    """How long a listing is kept."""
    timeout_s: float = 15.0
    """Longest one listing may take, its paging and throttle retries included."""
    narrows_to_scopes: bool = False
    """A target of every region (all namespaces) is narrowed to the regions the scopes name (Kubernetes namespaces)."""
    unregioned_kinds: frozenset[str] = frozenset()
    """With :attr:`narrows_to_scopes`: kinds that live in no region (cluster nodes), listed only for scopes of every region."""


class Estate:
    """Every source of the estate, asked together."""

    def __init__(
        self,
        sources: Sequence[EstateSource],
        *,
        settings: Mapping[str, SourceSettings] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sources = list(sources)
        self._settings = dict(settings or {})
        self._caches: dict[str, TTLCache] = {}
        for source in self.sources:
            ttl = self.settings(source.name).cache_ttl_s
            self._caches.setdefault(source.name, TTLCache(ttl, max_entries=4096, clock=clock))
        self._inflight: dict[tuple[str, str, str, str], asyncio.Future[tuple[Listing, float]]] = {}

    def settings(self, provider: str) -> SourceSettings:
        """The settings of ``provider`` (defaults when not configured)."""
        return self._settings.get(provider, SourceSettings())

    def kinds(self) -> frozenset[str]:
        """Every kind some source can list."""
        return frozenset(kind for source in self.sources for kind in source.kinds())

    def providers(self) -> list[str]:
        """Provider keys, in order, once each."""
        return list(dict.fromkeys(source.name for source in self.sources))

    async def view(
        self,
        kinds: Iterable[str],
        scopes: Sequence[Scope] = (),
        *,
        fresh: bool = False,
        providers: Collection[str] | None = None,
    ) -> EstateView:
        """Every resource of ``kinds`` the ``scopes`` show, from every source (or only ``providers``), concurrently."""
        asked = set(kinds)
        jobs: list[tuple[EstateSource, Target, str]] = []
        # The kinds whose listings chain the most calls start first: the lookup ends when the longest chain does.
        for kind in sorted((k for k in KINDS if k in asked), key=_chain_order):
            for source in self.sources:
                if (providers is None or source.name in providers) and kind in source.kinds():
                    jobs.extend((source, target, kind) for target in self._targets(source, kind, scopes))
        outcomes = await asyncio.gather(*(self._listing(source, target, kind, fresh) for source, target, kind in jobs))
        # Results read in provider, then kind order, whatever order the listings were started in.
        order = {id(source): i for i, source in enumerate(self.sources)}
        ranked = sorted(zip(jobs, outcomes, strict=True), key=lambda pair: (order[id(pair[0][0])], KINDS.index(pair[0][2])))
        resources: list[Resource] = []
        failures: list[Failure] = []
        sources: list[Source] = []
        cut: list[str] = []
        seen: set[tuple[str, str, str, str]] = set()
        for (source, target, kind), outcome in ranked:
            if isinstance(outcome, Failure):
                failures.append(outcome)
                continue
            listing, fetched_at, cached = outcome
            sources.append(self._source(source, target, listing, fetched_at, cached))
            if listing.cut:
                cut.append(f"{_where(target)} {kinds_label(kind)}")
            for resource in listing.resources:
                if resource.key in seen or not _shown(resource, scopes):
                    continue
                seen.add(resource.key)
                resources.append(resource)
        return EstateView(
            tuple(resources), tuple(failures), merge_sources(sources), tuple(cut), bool(scopes),
            tuple(dict.fromkeys(s.name for s, _, _ in jobs)),
        )

    async def changes(
        self, query: ChangeQuery, scopes: Sequence[Scope] = (), *, where: Collection[tuple[str, str, str]] | None = None
    ) -> tuple[list[Change], list[Failure], list[Source]]:
        """Changes matching ``query`` from every trail the scopes allow (or only the (provider, account, region) ``where``)."""
        jobs: list[tuple[EstateSource, Target]] = []
        for source in self.sources:
            for target in self._targets(source, "", scopes):
                if where is None or (target.provider, target.account, target.region) in where:
                    jobs.append((source, target))
        results = await asyncio.gather(*(self._trail(source, target, query) for source, target in jobs))
        changes: list[Change] = []
        failures: list[Failure] = []
        sources: list[Source] = []
        for (source, target), result in zip(jobs, results, strict=True):
            if isinstance(result, Failure):
                failures.append(result)
                continue
            found, api = result
            if api:
                sources.append(Source(
                    provider=source.name, label=provider_label(source.name), account=target.account, region=target.region,
                    api=api, fetched_at=time.time(),
                ))
            changes.extend(c for c in found if _change_shown(c, scopes))
        changes.sort(key=lambda c: c.time, reverse=True)
        return changes[: query.limit], failures, list(merge_sources(sources))

    # -- one listing -------------------------------------------------------------------

    def _targets(self, source: EstateSource, kind: str, scopes: Sequence[Scope]) -> list[Target]:
        """The targets of ``kind`` at ``source`` that a scope covers (all when unscoped); never the others."""
        out: list[Target] = []
        for target in source.targets(kind):
            if not scopes:
                out.append(target)
            elif target.region:
                if view_of(scopes, target.provider, target.account, target.region):
                    out.append(target)
            elif self.settings(source.name).narrows_to_scopes:
                regions = {s.region for s in scopes if allows_target(s, target.provider, target.account, s.region)}
                if "" in regions:
                    out.append(target)
                elif kind not in self.settings(source.name).unregioned_kinds:
                    out.extend(replace(target, region=r) for r in sorted(regions))
            elif any(allows_target(s, target.provider, target.account, s.region) for s in scopes):
                out.append(target)  # a global listing: each resource is checked against the scopes
        return out

    async def _listing(
        self, source: EstateSource, target: Target, kind: str, fresh: bool
    ) -> tuple[Listing, float, bool] | Failure:
        key = (source.name, target.account, target.region, kind)
        cache = self._caches[source.name]
        if not fresh:
            hit = cache.get(key)
            if hit is not None:
                return hit[0], hit[1], True
            pending = self._inflight.get(key)
            if pending is not None:
                try:
                    listing, fetched_at = await asyncio.shield(pending)
                except SourceError as exc:
                    return self._failure(source, target, kind, exc)
                return listing, fetched_at, False
        future: asyncio.Future[tuple[Listing, float]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            listing = await asyncio.wait_for(source.list(target, kind), self.settings(source.name).timeout_s)
        except TimeoutError:
            error = SourceError("timeout", f"timed out after {self.settings(source.name).timeout_s:g} s")
            return self._settle_failure(future, key, source, target, kind, error)
        except SourceError as exc:
            return self._settle_failure(future, key, source, target, kind, exc)
        except Exception as exc:  # a provider bug must not fail the whole lookup
            log.exception("estate_listing_crashed", provider=source.name, kind=kind)
            error = SourceError("error", f"internal error ({type(exc).__name__})")
            return self._settle_failure(future, key, source, target, kind, error)
        except BaseException:
            self._inflight.pop(key, None)
            future.cancel()
            raise
        fetched_at = time.time()
        cache.put(key, (listing, fetched_at))
        self._inflight.pop(key, None)
        future.set_result((listing, fetched_at))
        return listing, fetched_at, False

    def _settle_failure(
        self,
        future: asyncio.Future[tuple[Listing, float]],
        key: tuple[str, str, str, str],
        source: EstateSource,
        target: Target,
        kind: str,
        error: SourceError,
    ) -> Failure:
        self._inflight.pop(key, None)
        future.set_exception(error)
        future.exception()  # retrieved here: waiters may be none
        return self._failure(source, target, kind, error)

    def _failure(self, source: EstateSource, target: Target, kind: str, error: SourceError) -> Failure:
        log.warning("estate_listing_failed", provider=source.name, account=target.account, region=target.region,
                    kind=kind, failure=error.kind, reason=error.reason)
        return Failure(source.name, target.account, target.region, kinds_label(kind), error.kind, error.reason)

    async def _trail(self, source: EstateSource, target: Target, query: ChangeQuery) -> tuple[Sequence[Change], str] | Failure:
        try:
            found = await asyncio.wait_for(source.changes(target, query), self.settings(source.name).timeout_s)
        except TimeoutError:
            error = SourceError("timeout", f"timed out after {self.settings(source.name).timeout_s:g} s")
            return Failure(source.name, target.account, target.region, "the audit trail", error.kind, error.reason)
        except SourceError as exc:
            return Failure(source.name, target.account, target.region, "the audit trail", exc.kind, exc.reason)
        except Exception as exc:
            log.exception("estate_trail_crashed", provider=source.name)
            return Failure(source.name, target.account, target.region, "the audit trail", "error",
                           f"internal error ({type(exc).__name__})")
        return found, source.api_of("changes")

    @staticmethod
    def _source(source: EstateSource, target: Target, listing: Listing, fetched_at: float, cached: bool) -> Source:
        return Source(
            provider=source.name, label=provider_label(source.name), account=target.account, region=target.region,
            api=listing.api, fetched_at=fetched_at, cached=cached,
        )


_LONG_CHAINS = ("bucket", "load_balancer", "dns_record", "database")
"""Kinds whose listing is a chain of calls (a bucket's location then its policy; a balancer's listeners then health)."""


def _chain_order(kind: str) -> int:
    return _LONG_CHAINS.index(kind) if kind in _LONG_CHAINS else len(_LONG_CHAINS)


def _where(target: Target) -> str:
    where = "/".join(p for p in (target.account, target.region) if p)
    return f"{provider_label(target.provider)} {where}".strip()


def _shown(resource: Resource, scopes: Sequence[Scope]) -> bool:
    """Whether a scope covers the resource's provider, account, region and tags."""
    return not scopes or shows(view_of(scopes, resource.provider, resource.account, resource.region), resource.tags)


def _change_shown(change: Change, scopes: Sequence[Scope]) -> bool:
    return not scopes or bool(view_of(scopes, change.provider, change.account, change.region))
