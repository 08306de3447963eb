"""The fan-out shared by the cloud providers: every account × region at once.

Each page request is a blocking SDK call run on the provider's own thread
pool (so a slow cloud cannot starve the others of threads) under the
provider's timeout. The SDK clients are built by :meth:`CloudProvider.start`,
when the toolset starts, so no request's timeout pays for importing an SDK.
Successful (account, region) answers are cached for ``cache_ttl_s``; failures
are not cached and become :class:`~tools.server_record.ProviderFailure` notes while
the other regions and providers still answer. Each answer is reported as a
:class:`~botgateway.tooling.Source` (account, region, API, when the cloud
answered); one served from the cache says so and keeps its original time. A
fresh search (a Refresh) skips the cache and stores what it fetched.
"""

from __future__ import annotations

import asyncio
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

import structlog

from botgateway.config import CloudAccount, CloudProviderConfig
from botgateway.grant import Scope
from botgateway.tooling import Source, TTLCache
from tools.providers.base import ServerQuery
from tools.providers.scope import UNRESTRICTED, View, shows, view_of
from tools.server_record import ProviderFailure, SearchResult, Server, provider_label

__all__ = [
    "MAX_PAGES",
    "START_TIMEOUT_S",
    "CloudProvider",
    "NoCredentials",
    "Page",
    "ProviderCallError",
    "RegionAnswer",
]

log = structlog.get_logger(__name__)

MAX_PAGES = 20
"""Most pages fetched per (account, region, request): a runaway paginator cannot hang a call."""

START_TIMEOUT_S = 60.0
"""Longest :meth:`CloudProvider.start` waits for its clients (an SDK import takes about a second cold).

Only a hung credential source gets near it; start-up then goes on, and
each request builds the client itself, as it does after any failed build.
"""

V = TypeVar("V")


@dataclass(frozen=True)
class Page:
    """One page of a provider's answer."""

    items: list[Mapping[str, Any]]
    """Raw instance records as the API returned them."""
    next_token: Any = None
    """What fetches the next page; ``None`` when this was the last."""


@dataclass(frozen=True)
class RegionAnswer:
    """What one (account, region) answered, and where and when it came from."""

    servers: list[Server]
    """The servers found there that the asker may see."""
    more: bool
    """Paging stopped early: more servers match."""
    source: Source
    """Its provenance: the account, the region, the API and when the cloud answered."""


class ProviderCallError(Exception):
    """A provider call failed; ``reason`` is short and free of secrets."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NoCredentials(ProviderCallError):
    """No key in the config or environment, and no other credential source configured.

    Raised before any call, so a host without credentials never probes a metadata service.
    """


class CloudProvider(ABC):
    """Search every account × region of one cloud concurrently, with pagination."""

    name: ClassVar[str]
    """Provider key."""
    extra: ClassVar[str]
    """The pip extra that installs the SDK."""
    id_pattern: ClassVar[re.Pattern[str]]
    """What this cloud's instance ids look like."""
    api: ClassVar[str]
    """The API a search calls, as provenance names it (``DescribeInstances``, ``ec2:DescribeInstances``)."""

    page_size: int = 100
    """Records asked for per page (each cloud's API maximum unless overridden)."""

    def __init__(self, config: CloudProviderConfig, *, page_size: int | None = None) -> None:
        self.config = config
        if page_size is not None:
            self.page_size = page_size
        self.timeout_s = config.timeout_s
        self._cache = TTLCache(config.cache_ttl_s, max_entries=1024)
        pairs = sum(max(1, len(a.regions)) for a in config.accounts)
        # Several requests per region (one per address filter) may run at once.
        self._executor = ThreadPoolExecutor(max_workers=min(32, 3 * pairs + 1), thread_name_prefix=f"bg-{self.name}")
        self._clients: dict[tuple[str, str], Any] = {}
        self._closed = False

    # -- checks --------------------------------------------------------------------

    @classmethod
    def check_config(cls, config: CloudProviderConfig, section: str) -> list[str]:
        """Problems with the provider's section, one line each (empty: fine)."""
        problems = []
        if not config.accounts:
            problems.append(f"{section}.accounts: the provider is enabled but has no account; add one with its regions")
        names = [a.name for a in config.accounts]
        for i, account in enumerate(config.accounts):
            if not account.regions:
                problems.append(f"{section}.accounts[{i}].regions: list the regions to search (for example {cls.example_region!r})")
            if names.count(account.name) > 1:
                problems.append(f"{section}.accounts[{i}].name: account name {account.name!r} is used twice")
            if bool(account.access_key_id.get_secret_value()) != bool(account.access_key_secret.get_secret_value()):
                problems.append(
                    f"{section}.accounts[{i}]: set both access_key_id and access_key_secret, or neither "
                    "(then the SDK's usual environment variables are used)"
                )
        return problems

    example_region: ClassVar[str] = ""

    @classmethod
    def missing_sdk(cls, section: str) -> str:
        """The config-time error for an absent SDK."""
        return f"{section}: the SDK is not installed; run: pip install 'botgateway[{cls.extra}]'"

    # -- the protocol --------------------------------------------------------------

    def owns_id(self, instance_id: str) -> bool:
        """Whether ``instance_id`` looks like one of this cloud's ids."""
        return bool(self.id_pattern.fullmatch(instance_id))

    async def search(self, query: ServerQuery, scopes: Sequence[Scope] = (), *, fresh: bool = False) -> SearchResult:
        """Run ``query`` on every account × region the ``scopes`` allow (all when empty), concurrently.

        ``fresh``: ask the cloud even where a cached answer is live (and cache the new one).
        """
        scoped = bool(scopes)
        allowed: list[tuple[CloudAccount, str, View]] = []
        for account in self.config.accounts:
            for region in account.regions:
                view = view_of(scopes, self.name, account.name, region)
                if view:  # a target no scope allows is never called
                    allowed.append((account, region, view))
        if scoped and not allowed:
            return SearchResult(query.describe(), scoped=True)
        jobs = [(a, r, v) for a, r, v in allowed if not query.region or r == query.region]
        notes: list[str] = []
        if query.region and not jobs:
            known = sorted({r for _, r, _ in allowed})
            label, regions = provider_label(self.name), ", ".join(known) or "none"
            if scoped:
                notes.append(f"Note: region {query.region} is not one you may search in {label}; you may search: {regions}.")
            else:
                notes.append(f"Note: region {query.region} is not configured for {label}; configured: {regions}.")
        outcomes = await asyncio.gather(
            *(self._search_region(account, region, query, view, fresh=fresh) for account, region, view in jobs)
        )
        servers: list[Server] = []
        failures: list[ProviderFailure] = []
        sources: list[Source] = []
        truncated = False
        for outcome in outcomes:
            if isinstance(outcome, ProviderFailure):
                failures.append(outcome)
            else:
                truncated = truncated or outcome.more
                servers.extend(outcome.servers)
                sources.append(outcome.source)
        return SearchResult.merge(
            query.describe(),
            [
                SearchResult(
                    query.describe(),
                    tuple(servers),
                    tuple(failures),
                    (self.name,),
                    notes=tuple(notes),
                    answered=(self.name,) if sources or not jobs else (),
                    more=truncated,
                    scoped=scoped,
                    sources=tuple(sources),
                )
            ],
            limit=query.limit,
        )

    async def list_region(
        self, account_name: str, region: str, *, limit: int, fresh: bool = False
    ) -> RegionAnswer | ProviderFailure:
        """Every server of one configured (account, region), up to ``limit`` (the estate's server listing)."""
        account = next((a for a in self.config.accounts if a.name == account_name), None)
        if account is None:
            return ProviderFailure(self.name, f"account {account_name!r} is not configured", region=region, account=account_name)
        return await self._search_region(account, region, ServerQuery("list", limit=limit), UNRESTRICTED, fresh=fresh)

    async def start(self) -> None:
        """Build the client of every account × region now, on the pool, outside any request's timeout.

        Building the first client imports the cloud's SDK, about a second on a
        cold, busy host: inside the first request's timeout it made that
        request fail. A client that cannot be built now (no credentials) is
        logged and built again by each request, which reports why.
        """
        loop = asyncio.get_running_loop()
        try:
            failed = await asyncio.wait_for(loop.run_in_executor(self._executor, self._build_clients), START_TIMEOUT_S)
        except TimeoutError:
            log.warning("provider_start_slow", provider=self.name, timeout_s=START_TIMEOUT_S)
            return
        for account, region, reason in failed:
            log.warning("provider_client_failed", provider=self.name, account=account, region=region, reason=reason)
        log.info("provider_started", provider=self.name, clients=len(self._clients), failed=len(failed))

    def _build_clients(self) -> list[tuple[str, str, str]]:
        """Build every client (blocking, one thread: SDK imports are not worth racing); (account, region, reason) of failures."""
        failed = []
        for account in self.config.accounts:
            for region in account.regions:
                try:
                    self._client(account, region)
                except ProviderCallError as exc:
                    failed.append((account.name, region, exc.reason))
                except Exception as exc:  # an SDK error of any shape; the request reports it again
                    failed.append((account.name, region, self.classify(exc)))
        return failed

    async def aclose(self) -> None:
        """Stop the thread pool (running SDK calls finish in the background)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- one (account, region) ----------------------------------------------------------

    async def _search_region(
        self, account: CloudAccount, region: str, query: ServerQuery, view: View = UNRESTRICTED, *, fresh: bool = False
    ) -> RegionAnswer | ProviderFailure:
        # The view filters while paging (so the limit counts only what may be shown): part of the key.
        key = (account.name, region, query, view)
        cached: RegionAnswer | None = None if fresh else self._cache.get(key)
        if cached is not None:
            return replace(cached, source=replace(cached.source, cached=True))
        started = time.monotonic()
        try:
            client = self._clients.get((account.name, region))
            if client is None:  # not built at start (no credentials then, or no start at all)
                client = await self._run(self._client, account, region)
            merged: dict[str, Server] = {}
            more = False
            # Filters of one request are ANDed by every API, so each address field is its own request.
            requests = self.requests_for(query)
            results = await asyncio.gather(
                *(self._paginate(client, account, region, r, query, view) for r in requests), return_exceptions=True
            )
            # Wait for every request before failing, so no task is left with an unretrieved error.
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            for found, truncated in results:  # type: ignore[misc]
                more = more or truncated
                for server in found:
                    merged.setdefault(server.instance_id, server)
        except ProviderCallError as exc:
            log.warning("provider_failed", provider=self.name, account=account.name, region=region, reason=exc.reason)
            return ProviderFailure(self.name, exc.reason, region=region, account=account.name)
        source = Source(
            provider=self.name, label=provider_label(self.name), account=account.name, region=region, api=self.api,
            fetched_at=time.time(),
        )
        outcome = RegionAnswer(list(merged.values()), more, source)
        log.debug(
            "provider_answered", provider=self.name, account=account.name, region=region,
            query=query.kind, found=len(merged), duration_s=round(time.monotonic() - started, 3),
        )
        self._cache.put(key, outcome)
        return outcome

    async def _paginate(
        self, client: Any, account: CloudAccount, region: str, request: Mapping[str, Any], query: ServerQuery, view: View
    ) -> tuple[list[Server], bool]:
        found: list[Server] = []
        token: Any = None
        for _ in range(MAX_PAGES):
            page = await self._run(self.fetch_page, client, region, request, token)
            for item in page.items:
                server = self.to_server(item, account.name, region)
                if query.accepts(server) and shows(view, server.tags):
                    found.append(server)
            if len(found) > query.limit:
                # One past the limit tells the caller there are more than it will show.
                return found[: query.limit + 1], True
            token = page.next_token
            if token is None:
                return found, False
        return found, True

    async def _run(self, fn: Callable[..., V], *args: Any) -> V:
        """Run a blocking SDK call on our pool under the provider timeout; map its errors."""
        if self._closed:
            raise ProviderCallError("provider is shut down")
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self._executor, lambda: fn(*args)), self.timeout_s)
        except TimeoutError:
            raise ProviderCallError(f"timed out after {self.timeout_s:g} s") from None
        except ProviderCallError:
            raise
        except Exception as exc:  # SDK errors of every shape end up as a short reason
            raise ProviderCallError(self.classify(exc)) from None

    def _client(self, account: CloudAccount, region: str) -> Any:
        """The client of (``account``, ``region``), built on first use (blocking)."""
        key = (account.name, region)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = self.make_client(account, region)
        return client

    # -- what each cloud implements (blocking, run on the pool) ----------------------

    @abstractmethod
    def make_client(self, account: CloudAccount, region: str) -> Any:
        """An SDK client for ``account`` in ``region``."""

    @abstractmethod
    def requests_for(self, query: ServerQuery) -> list[Mapping[str, Any]]:
        """The API filter sets answering ``query`` (results are merged)."""

    @abstractmethod
    def fetch_page(self, client: Any, region: str, request: Mapping[str, Any], token: Any) -> Page:
        """Fetch one page (blocking)."""

    @abstractmethod
    def to_server(self, item: Mapping[str, Any], account: str, region: str) -> Server:
        """Translate one raw instance record."""

    @abstractmethod
    def classify(self, exc: Exception) -> str:
        """A short, secret-free reason for an SDK error ("permission denied")."""
