"""What the cloud estate sources share about driving a blocking SDK: clients, call budgets, throttle retries, paging.

Every SDK call runs on the source's own thread pool (so one slow cloud cannot
starve the others of threads) under the source's timeout. Before each call the
source draws one call from the API's budget (:class:`~botgateway.budget.RateBudget`,
keyed by provider, account, region and API, at the QPS the cloud documents or
the config sets), so a fan-out never fires past a documented limit however
many questions ask at once. A throttle answer is retried with backoff while
the deadline allows, never in a tight loop, and pauses that API's budget for
every other caller too.

A subclass says which products it has (:attr:`SdkSource.products`), how to
build a client of one, how to map an SDK error to a :class:`SourceError`, and
how to list each kind; the mapping of raw records to
:class:`~tools.estate.resource.Resource` lives in the provider's own mapping
module.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib.util
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import structlog

from botgateway.budget import RateBudget, RateLimit
from botgateway.config import CloudAccount, CloudProviderConfig
from tools.estate.budgeted import call_within_budget
from tools.estate.resource import Change
from tools.estate.source import MAX_PER_LISTING, ChangeQuery, Listing, Prerequisite, SourceError, Target

__all__ = ["Page", "Product", "SdkSource"]

log = structlog.get_logger(__name__)

V = TypeVar("V")

@dataclass(frozen=True)
class Product:
    """One cloud service a source calls (RDS, ELBv2, ActionTrail)."""

    key: str
    """Short key, also the key of ``endpoints`` overrides in the config (``rds``, ``elbv2``, ``actiontrail``)."""
    label: str
    """Human name ("ApsaraDB RDS", "Amazon Route 53")."""
    modules: tuple[str, ...]
    """Python modules its SDK provides (checked before use)."""
    qps: float = 10.0
    """Documented (or conservative) calls per second per account and region, for each of its APIs."""
    burst: int = 0
    """Calls allowed at once before the rate applies (0: one second's worth)."""


@dataclass(frozen=True)
class Page:
    """One page of an SDK answer."""

    items: Sequence[Mapping[str, Any]]
    """Raw records as the API returned them (dicts)."""
    next_token: Any = None
    """What fetches the next page; ``None`` when this was the last."""


class SdkSource(ABC):
    """The plumbing of one cloud's estate source; subclasses add the kinds."""

    name: ClassVar[str]
    """Provider key."""
    label: ClassVar[str]
    """Human name ("Alibaba Cloud")."""
    extra: ClassVar[str]
    """The pip extra that installs the SDKs (``aliyun``)."""
    products: ClassVar[Mapping[str, Product]]
    """Products by key."""
    kind_products: ClassVar[Mapping[str, str]]
    """Which product lists each kind (``{"database": "rds", ...}``); the kinds this source knows."""
    global_kinds: ClassVar[frozenset[str]] = frozenset()
    """Kinds listed once per account, not per region (DNS zones, bucket lists)."""
    changes_product: ClassVar[str] = ""
    """The product whose trail :meth:`changes` reads."""

    def __init__(self, config: CloudProviderConfig, *, budget: RateBudget | None = None) -> None:
        self.config = config
        self.timeout_s = config.timeout_s
        self.budget = budget if budget is not None else RateBudget()
        pairs = sum(max(1, len(a.regions)) for a in config.accounts)
        # One lookup lists every kind at every target, some with follow-up calls: the budgets, not the pool, limit calls.
        workers = min(64, len(self.kind_products) * pairs + 8)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"bg-estate-{self.name}")
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._clients_lock = threading.Lock()
        self._accounts = {a.name: a for a in config.accounts}
        self._closed = False

    # -- what the fan-out asks -------------------------------------------------------

    def kinds(self) -> frozenset[str]:
        """The kinds whose SDK is installed."""
        return frozenset(kind for kind, product in self.kind_products.items() if self.installed(product))

    def targets(self, kind: str = "") -> Sequence[Target]:
        """Every account × region; an account alone for a global kind. ``kind=""``: where the trails are read."""
        out: list[Target] = []
        for account in self.config.accounts:
            if kind in self.global_kinds:
                out.append(Target(self.name, account.name, ""))
            else:
                out.extend(Target(self.name, account.name, region) for region in account.regions)
        return out

    def api_of(self, kind: str) -> str:
        """``rds:DescribeDBInstances``-style name of what a listing of ``kind`` calls."""
        return self.apis.get(kind, kind)

    apis: ClassVar[Mapping[str, str]] = {}
    """Provenance names of the listing APIs by kind."""

    async def list(self, target: Target, kind: str) -> Listing:
        """Every resource of ``kind`` at ``target`` (see :meth:`list_kind`)."""
        product = self.kind_products.get(kind)
        if product is None:
            raise SourceError("not_found", f"{self.label} has no {kind} listing")
        if not self.installed(product):
            raise SourceError("error", self.missing_sdk(product))
        return await self.list_kind(target, kind)

    async def changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """Changes from the provider's audit trail (see :meth:`read_changes`)."""
        if not self.changes_product:
            return []
        if not self.installed(self.changes_product):
            raise SourceError("error", self.missing_sdk(self.changes_product))
        return await self.read_changes(target, query)

    def prerequisites(self) -> Sequence[Prerequisite]:
        """SDKs installed, and credentials for each account, checked without calling anything."""
        out = [
            Prerequisite(
                f"{self.label} SDK for {product.label}",
                self.installed(product.key),
                "" if self.installed(product.key) else f"pip install 'botgateway[{self.extra}]'",
            )
            for product in self.products.values()
        ]
        for account in self.config.accounts:
            found = self.has_credentials(account)
            out.append(
                Prerequisite(f"{self.label} credentials of account {account.name}", found, "" if found else self.credentials_fix())
            )
        return out

    async def probe(self, target: Target) -> None:
        """List the first kind this source knows at ``target``: proves the endpoint, credentials and permission."""
        kinds = sorted(self.kinds() - self.global_kinds) or sorted(self.kinds())
        if not kinds:
            raise SourceError("error", f"no {self.label} SDK is installed; pip install 'botgateway[{self.extra}]'")
        await self.list(target, kinds[0])

    async def start(self) -> None:
        """Import the installed SDKs and build every client now, on the pool, outside any request's timeout.

        A client takes a while to build (the first imports its SDK): calls the budget granted while it was
        built would otherwise reach the cloud together, past its rate. A client that cannot be built now (no
        credentials) is built again by each call, which reports why.
        """
        modules = [m for p in self.products.values() if self.installed(p.key) for m in p.modules]
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self._executor, _import_all, modules), 60)
        except Exception as exc:  # an SDK that fails to import is reported by each call again
            log.warning("estate_source_start_failed", provider=self.name, error=type(exc).__name__)
            return
        wanted = [
            (product, Target(self.name, account.name, region))
            for account in self.config.accounts
            for product in self.products
            if self.installed(product)
            for region in (*account.regions, "")
        ]
        await asyncio.gather(*(loop.run_in_executor(self._executor, self._prebuild, p, t) for p, t in wanted))

    def _prebuild(self, product: str, target: Target) -> None:
        try:
            self._client(product, target)
        except Exception:  # no credentials yet, or a product with no global endpoint: each call reports it
            return

    async def aclose(self) -> None:
        """Stop the pool (running calls finish in the background)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- plumbing for subclasses -------------------------------------------------------

    def installed(self, product: str) -> bool:
        """Whether every module of ``product``'s SDK can be imported."""
        return all(_found(module) for module in self.products[product].modules)

    def missing_sdk(self, product: str) -> str:
        """What to do when ``product``'s SDK is absent."""
        return f"the {self.products[product].label} SDK is not installed; run: pip install 'botgateway[{self.extra}]'"

    def account(self, target: Target) -> CloudAccount:
        """The configured account of ``target``."""
        return self._accounts[target.account]

    def endpoint(self, account: CloudAccount, product: str) -> str | None:
        """The endpoint override for ``product``: its own entry in ``endpoints``, else ``endpoint``, else none."""
        return self.config.endpoints.get(product) or account.endpoint

    def limit_of(self, product: str, api: str) -> RateLimit:
        """The call budget of one API: the config's ``api_qps`` for it, else the product's documented rate."""
        spec = self.products[product]
        qps = self.config.api_qps.get(api) or self.config.api_qps.get(product) or spec.qps
        return RateLimit(rate_per_s=qps, burst=spec.burst or max(1, int(qps)))

    async def call(self, target: Target, product: str, api: str, fn: Callable[..., V], *args: Any, deadline: float = 0.0) -> V:
        """Run ``fn(client, *args)`` for ``target`` on the pool within the API's budget; retry throttles until ``deadline``.

        ``deadline`` is a ``time.monotonic()`` instant (default: the source's timeout from now).
        """
        if self._closed:
            raise SourceError("error", "provider is shut down")
        deadline = deadline or time.monotonic() + self.timeout_s
        key = f"{self.name}:{target.account}:{target.region}:{api}"
        return await call_within_budget(
            self.budget, key, self.limit_of(product, api), lambda: self._run(target, product, fn, args, deadline),
            deadline=deadline, api=api, timeout_s=self.timeout_s,
        )

    async def paginate(
        self,
        target: Target,
        product: str,
        api: str,
        fetch: Callable[[Any, Any], Page],
        *,
        bound: int = MAX_PER_LISTING,
    ) -> tuple[builtins.list[Mapping[str, Any]], bool]:
        """Every record ``fetch(client, token)`` pages through, up to ``bound``; (records, cut)."""
        deadline = time.monotonic() + self.timeout_s
        items: list[Mapping[str, Any]] = []
        token: Any = None
        while True:
            page = await self.call(target, product, api, fetch, token, deadline=deadline)
            items.extend(page.items)
            if len(items) >= bound:
                return items[:bound], page.next_token is not None or len(items) > bound
            token = page.next_token
            if token is None:
                return items, False

    async def _run(self, target: Target, product: str, fn: Callable[..., V], args: tuple[Any, ...], deadline: float) -> V:
        loop = asyncio.get_running_loop()

        def blocking() -> V:
            return fn(self._client(product, target), *args)

        try:
            return await asyncio.wait_for(loop.run_in_executor(self._executor, blocking), max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            raise SourceError("timeout", f"timed out after {self.timeout_s:g} s") from None
        except SourceError:
            raise
        except Exception as exc:  # SDK errors of every shape become a short reason
            raise self.classify(exc, product) from None

    def _client(self, product: str, target: Target) -> Any:
        key = (product, target.account, target.region)
        client = self._clients.get(key)
        if client is None:
            with self._clients_lock:  # two calls of a cold target build one client, not two
                client = self._clients.get(key)
                if client is None:
                    client = self._clients[key] = self.make_client(product, self.account(target), target.region)
        return client

    # -- what each cloud implements --------------------------------------------------

    @abstractmethod
    def make_client(self, product: str, account: CloudAccount, region: str) -> Any:
        """An SDK client of ``product`` for ``account`` in ``region`` (blocking); raises :class:`SourceError`."""

    @abstractmethod
    def classify(self, exc: Exception, product: str) -> SourceError:
        """A short, secret-free :class:`SourceError` for an SDK error; permission errors name the missing action."""

    @abstractmethod
    async def list_kind(self, target: Target, kind: str) -> Listing:
        """List one kind at one target with :meth:`paginate` / :meth:`call`, mapping each record."""

    async def read_changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """Read the audit trail at ``target`` (sources with :attr:`changes_product` implement it)."""
        return []

    @abstractmethod
    def has_credentials(self, account: CloudAccount) -> bool:
        """Whether keys are configured or the SDK's credential chain has something to find."""

    @abstractmethod
    def credentials_fix(self) -> str:
        """How to give this cloud credentials (config keys, environment variables)."""


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def _import_all(modules: Sequence[str]) -> None:
    """Import each SDK package and the client and model modules its calls load (big: seconds on a cold host)."""
    for module in modules:
        __import__(module)
        leaf = module.split(".")[1] if module.count(".") >= 2 else ""
        for extra in (f"{module}.client", f"{module}.models", f"{module}.{leaf}_client" if leaf else ""):
            if extra and _found(extra):
                importlib.import_module(extra)


def env_has(*names: str) -> bool:
    """Whether any of these environment variables is set (a credential chain has something to find)."""
    return any(os.environ.get(name) for name in names)
