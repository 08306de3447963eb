"""The estate fan-out scenario: ``find_resource`` over every provider × account × region × kind, cold and warm.

Issue 27's acceptance: with fakes answering every call in ``--estate-delay-ms``
(100 ms), one ``find_resource`` over 3 providers × 2 accounts × 3 regions ×
every kind answers in ≤ 1.0 s cold (p95) and ≤ 50 ms warm (p95), and no
provider's API is called past its documented QPS.

- **The fakes** run in a process of their own (:func:`_serve`), so their
  threads (moto's especially) do not share the measured process's GIL. Each
  Alibaba Cloud and Tencent Cloud account is its own loopback fake (the
  estate fake of ``tests/fakes``, with ECS/CVM ``DescribeInstances`` for the
  servers answered by the server fake), every request signed with that
  account's keys and answered after ``delay_s``. The pages hold up to 100
  records, as the real APIs do. AWS is one moto server behind a delaying,
  recording proxy per account (moto cannot add latency), so an AWS call takes
  the delay plus moto's own time. Each fake holds its sample estate in the
  account's first region; the others answer empty lists. Every request is
  stamped with ``time.monotonic()`` on arrival (system-wide on Linux, so it
  compares with this process's clock).
- **The gateway side** builds the toolset exactly as the gateway does
  (``tools.catalog.build_toolset`` from a :class:`ToolsConfig` with the three
  clouds, every toolset) and runs ``find_resource`` through a
  :class:`ToolRegistry` configured as ``botgateway run`` configures it.
- **Cold**: a fresh toolset's first lookup is reported apart (every client's
  first call); then each run times one call with every cache bypassed (a
  listing's TTL ran out, or Refresh). Runs start at least a second after the
  previous run's last request, so no one-second window holds two runs. **Warm**: one toolset, one unmeasured call, then many
  calls, timed one after another.
- **Baseline**, in the same run: the same cold and warm measures with one
  account × one region per provider. The ratio says how much the fan-out's
  width costs (1.0: nothing).
- **QPS**: the fakes' arrival stamps, grouped per (provider, account, region,
  API as the source budgets it), give the most calls in any one-second
  window, judged against the source's own ``limit_of`` (rate + burst: a token
  bucket allows that many in a second).
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import multiprocessing
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

from rich.table import Table

from bench.analysis import Goal
from bench.settings import BenchSettings, Scenario
from bench.stats import INF, summarize
from bench.worker_process import WorkerFailed
from botgateway.cli.collector import settle_after_startup
from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, LogConfig, ToolsConfig
from botgateway.logs import configure_logging
from botgateway.tooling import ToolContext, ToolRegistry
from tests.fakes.aliyun_estate import FakeAliyunEstate
from tests.fakes.clouds import FakeAliyun, FakeCloud, FakeTencent, aliyun_instance, tencent_instance
from tests.fakes.tencent_estate import FakeTencentEstate
from tools.catalog import Toolset, build_toolset

__all__ = [
    "COLD_P95_GOAL_S", "REGIONS", "WARM_P95_GOAL_S", "ApiWindow", "FakeCall", "api_windows", "estate_goals",
    "estate_lines", "estate_progress", "estate_table", "max_in_window", "run_estate_scenario",
]

COLD_P95_GOAL_S = 1.0
"""Issue 27: a cold lookup over the whole estate, p95."""
WARM_P95_GOAL_S = 0.05
"""Issue 27: a warm lookup (every listing cached), p95."""
REGIONS: Mapping[str, tuple[str, ...]] = {
    "aliyun": ("cn-hangzhou", "cn-shanghai", "cn-beijing"),
    "tencent": ("ap-guangzhou", "ap-shanghai", "ap-beijing"),
    "aws": ("us-west-2", "us-east-1", "eu-west-1"),
}
"""Each provider's regions, the one holding its fake's sample estate first."""
COLD_QUERY = "10.0.3.7"
"""The issue's "what is 10.0.3.7?" (an RDS address on Alibaba Cloud, a CDB VIP on Tencent Cloud)."""
WARM_QUERIES = ("10.0.3.7", "api.example.com", "orders", "prod-db-03")
"""Warm calls cycle through these: an IP, a DNS name, a name fragment, a name."""
_SECRET = "bench-secret-key"
_PAGE = 100
"""Records per page, as the real list APIs allow."""
_ALIYUN_PRODUCTS = {
    "2014-08-15": "rds", "2015-01-01": "kvstore", "2014-05-15": "slb", "2016-04-28": "vpc", "2014-05-26": "ecs",
    "2015-01-09": "alidns", "2020-07-06": "actiontrail", "oss": "oss",
}
"""The Alibaba Cloud product of each OpenAPI version the fake answers (OSS is recorded as ``oss``)."""
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection", "content-length",
        "date", "server"}
"""Headers the proxy does not pass on (hop-by-hop, or set by its own server)."""


@dataclass(frozen=True)
class FakeCall:
    """One request as a fake received it."""

    provider: str
    account: str
    region: str
    """Where it was asked (``RegionId``, the signature's scope); empty for a global API."""
    product: str
    """The source's product key (``rds``, ``clb``, ``ec2``)."""
    api: str
    """The API as the source's budget names it (``DescribeLoadBalancers``, ``clb:DescribeListeners``, ``ec2``)."""
    at: float
    """``time.monotonic()`` on arrival."""


# --- the fakes (their own process) ----------------------------------------------------------------


class _AliyunServers(FakeAliyun):
    """ECS ``DescribeInstances`` (the server provider), its requests stamped on arrival."""

    def record(self, entry: dict[str, Any]) -> None:
        """Remember the request with its arrival time."""
        super().record({**entry, "time": time.monotonic()})


class _AliyunAccount(FakeAliyunEstate):
    """One Alibaba Cloud account on one port: the estate APIs, and ECS ``DescribeInstances`` for the servers."""

    def __init__(self, servers: FakeAliyun, **options: Any) -> None:
        super().__init__(**options)
        self.servers = servers

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        ecs = handler.headers.get("x-acs-version") == "2014-05-26"
        if ecs and handler.headers.get("x-acs-action") == "DescribeInstances":
            return self.servers._handle(handler)
        return super()._handle(handler)


class _TencentServers(FakeTencent):
    """CVM ``DescribeInstances`` (the server provider), its requests stamped on arrival."""

    def record(self, entry: dict[str, Any]) -> None:
        """Remember the request with its arrival time."""
        super().record({**entry, "t": time.monotonic()})


class _TencentAccount(FakeTencentEstate):
    """One Tencent Cloud account on one port: the estate APIs, and CVM ``DescribeInstances`` for the servers."""

    def __init__(self, servers: FakeTencent, **options: Any) -> None:
        super().__init__(**options)
        self.servers = servers

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        cvm = handler.headers.get("X-TC-Version") == "2017-03-12"
        if cvm and handler.headers.get("X-TC-Action") == "DescribeInstances":
            return self.servers._handle(handler)
        return super()._handle(handler)


class _DelayProxy(FakeCloud):
    """One AWS account: a proxy in front of moto that stamps each request, waits ``delay_s``, then forwards it."""

    def __init__(self, upstream: str, *, delay_s: float) -> None:
        super().__init__({}, delay_s=delay_s)
        self.upstream = urlsplit(upstream)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        service, region = _aws_scope(handler.headers.get("Authorization", ""))
        action = _aws_action(handler, body, service)
        self.record({"time": time.monotonic(), "service": service, "region": region, "action": action})
        self.wait()
        connection = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=30)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
            connection.request(handler.command, handler.path, body=body or None, headers=headers)
            answer = connection.getresponse()
            payload = answer.read()
        finally:
            connection.close()
        handler.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


def _aws_scope(auth: str) -> tuple[str, str]:
    """(service, region) of a SigV4 ``Authorization``'s credential scope."""
    scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
    return (scope[3], scope[2]) if len(scope) >= 5 else ("", "")


def _aws_action(handler: BaseHTTPRequestHandler, body: bytes, service: str) -> str:
    """The operation of an AWS request: JSON target, query ``Action``, or the REST path of S3 and Route 53."""
    target = handler.headers.get("X-Amz-Target", "")
    if target:
        return target.rpartition(".")[2]
    form = dict(parse_qsl(body.decode(errors="replace")))
    if "Action" in form:
        return form["Action"]
    split = urlsplit(handler.path)
    query = parse_qs(split.query, keep_blank_values=True)
    if service == "s3":
        named = [n for key, n in (("acl", "GetBucketAcl"), ("policyStatus", "GetBucketPolicyStatus"),
                                  ("location", "GetBucketLocation")) if key in query]
        return named[0] if named else ("ListBuckets" if not split.path.strip("/") else f"{handler.command} object")
    if service == "route53":
        return "ListResourceRecordSets" if split.path.endswith("/rrset") else "ListHostedZones"
    return handler.command


def _account_keys(provider: str, index: int) -> tuple[str, str]:
    return f"bench-{provider}-key-{index}", _SECRET


class _FakeEstates:
    """Every provider's fakes for ``accounts`` accounts; :meth:`take` hands over the requests since the last take."""

    def __init__(self, providers: Sequence[str], accounts: int, delay_s: float) -> None:
        self.providers, self.accounts, self.delay_s = list(providers), accounts, delay_s
        self.fakes: list[tuple[str, str, FakeCloud]] = []
        self._seen: dict[int, int] = {}
        self._moto: Any = None

    def start(self) -> dict[str, list[str]]:
        """Start every fake; each provider's endpoints, one per account."""
        endpoints: dict[str, list[str]] = {}
        for provider in self.providers:
            starts = {"aliyun": self._aliyun, "tencent": self._tencent, "aws": self._aws}
            endpoints[provider] = [starts[provider](i) for i in range(self.accounts)]
        return endpoints

    def _aliyun(self, index: int) -> str:
        home, *others = REGIONS["aliyun"]
        key, secret = _account_keys("aliyun", index)
        web = [aliyun_instance(f"i-bp1web0{n}", f"web-0{n}", f"172.16.1.1{n - 1}", region=home) for n in (1, 2)]
        servers = _AliyunServers({home: web, **{r: [] for r in others}}, access_key=key, page_cap=_PAGE,
                                 delay_s=self.delay_s)
        fake = _AliyunAccount(servers, access_key=key, access_secret=secret, page_cap=_PAGE, delay_s=self.delay_s)
        self.fakes += [("aliyun", f"acct{index}", fake), ("aliyun", f"acct{index}", servers)]
        return fake.start().endpoint

    def _tencent(self, index: int) -> str:
        home, *others = REGIONS["tencent"]
        key, secret = _account_keys("tencent", index)
        web = [tencent_instance(f"ins-gz00000{n}", f"gz-web-0{n}", f"10.66.0.1{n}") for n in (1, 2)]
        servers = _TencentServers({home: web, **{r: [] for r in others}}, access_key=key, page_cap=_PAGE,
                                  delay_s=self.delay_s)
        fake = _TencentAccount(servers, secret_id=key, secret_key=secret, page_cap=_PAGE, delay_s=self.delay_s)
        self.fakes += [("tencent", f"acct{index}", fake), ("tencent", f"acct{index}", servers)]
        return fake.start().endpoint

    def _aws(self, index: int) -> str:
        if self._moto is None:
            from tests.fakes.aws_estate import seed
            from tests.fakes.clouds import start_moto

            self._moto = start_moto()
            host, port = self._moto.get_host_and_port()
            self._upstream = f"http://{host}:{port}"
            seed(self._upstream)
        proxy = _DelayProxy(self._upstream, delay_s=self.delay_s)
        self.fakes.append(("aws", f"acct{index}", proxy))
        return proxy.start().endpoint

    def take(self) -> list[FakeCall]:
        """The requests every fake received since the last take, normalized."""
        out: list[FakeCall] = []
        for provider, account, fake in self.fakes:
            calls = fake.calls()
            fresh, self._seen[id(fake)] = calls[self._seen.get(id(fake), 0):], len(calls)
            out.extend(_normalized(provider, account, entry) for entry in fresh)
        return out

    def stop(self) -> None:
        """Stop every fake and moto."""
        for _, _, fake in self.fakes:
            fake.stop()
        if self._moto is not None:
            self._moto.stop()


def _normalized(provider: str, account: str, entry: Mapping[str, Any]) -> FakeCall:
    """One recorded request in the source's terms: its product and the API name its budget is keyed by."""
    region = str(entry.get("region") or "")
    action = str(entry.get("action") or "")
    at = float(entry.get("time") or entry.get("t") or 0.0)
    if provider == "aliyun":
        product = _ALIYUN_PRODUCTS.get(str(entry.get("version") or "2014-05-26"), "?")
        return FakeCall(provider, account, region, product, action, at)
    if provider == "tencent":
        service = str(entry.get("service") or "cvm")
        return FakeCall(provider, account, region, service, f"{service}:{action}", at)
    service = str(entry.get("service") or "")
    product = {"elasticloadbalancing": "elbv2"}.get(service, service)
    # EC2's Describe* calls share one bucket per account and region, Route 53's every call one per account.
    api = product if product in ("ec2", "route53") else action
    return FakeCall(provider, account, region, product, api, at)


def _serve(conn: Connection, providers: list[str], accounts: int, delay_s: float) -> None:
    """The fakes' process: start them, send their endpoints, then answer ``take`` until ``stop``."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    fakes = _FakeEstates(providers, accounts, delay_s)
    try:
        conn.send(fakes.start())
        while conn.recv() != "stop":
            conn.send(fakes.take())
    finally:
        fakes.stop()
        conn.send("stopped")


class _FakesProcess:
    """The parent's handle on the fakes' process."""

    def __init__(self, providers: Sequence[str], accounts: int, delay_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, list(providers), accounts, delay_s), daemon=True)

    async def start(self) -> dict[str, list[str]]:
        """Start the process; each provider's endpoints."""
        self._process.start()
        endpoints: dict[str, list[str]] = await asyncio.to_thread(self._receive, 180.0)
        return endpoints

    async def take(self) -> list[FakeCall]:
        """The requests since the last take."""
        self._conn.send("take")
        calls: list[FakeCall] = await asyncio.to_thread(self._receive, 60.0)
        return calls

    async def stop(self) -> None:
        """Stop the fakes and the process."""
        if self._process.is_alive():
            self._conn.send("stop")
            await asyncio.to_thread(self._receive, 30.0)
        await asyncio.to_thread(self._process.join, 10)
        if self._process.is_alive():
            self._process.kill()

    def _receive(self, timeout_s: float) -> Any:
        try:
            if self._conn.poll(timeout_s):
                return self._conn.recv()
        except EOFError:
            raise WorkerFailed(f"the fakes' process ended (exit code {self._process.exitcode})") from None
        raise WorkerFailed(f"the fakes' process did not answer within {timeout_s:g} s")


# --- the gateway side ------------------------------------------------------------------------------


def tools_config(endpoints: Mapping[str, Sequence[str]], *, accounts: int, regions: int) -> ToolsConfig:
    """The tools section: every provider of ``endpoints`` with ``accounts`` accounts × ``regions`` regions each,
    every toolset, the static inventory off (the clouds are measured)."""
    sections: dict[str, CloudProviderConfig] = {}
    for provider, urls in endpoints.items():
        listed = [
            CloudAccount(name=f"acct{i}", access_key_id=_account_keys(provider, i)[0],
                         access_key_secret=_SECRET,
                         regions=list(REGIONS[provider][:regions]), endpoint=urls[i])
            for i in range(accounts)
        ]
        sections[provider] = CloudProviderConfig(enabled=True, accounts=listed)
    return ToolsConfig(inventory=InventoryConfig(enabled=False), **sections)


def _registry(config: ToolsConfig, toolset: Toolset) -> ToolRegistry:
    """The toolset's tools in a registry configured as ``botgateway run`` configures it."""
    return ToolRegistry(toolset.tools, default_timeout_s=config.default_timeout_s,
                        max_result_chars=config.max_result_chars, max_calls_per_round=config.max_calls_per_round,
                        sync_workers=config.sync_workers)


_ASKER = ToolContext(user_id="U0BENCH", platform="slack", conversation_id="bench-estate", chat_id="C0BENCH",
                     is_group=True)


@dataclass(frozen=True)
class Lookup:
    """One timed ``find_resource`` call."""

    seconds: float
    """Latency, +inf when the call failed or a source was not reached."""
    found: int
    """Resources that matched."""
    problem: str = ""
    """Why it counts as a failure (a tool error, a source not reached)."""


async def _lookup(registry: ToolRegistry, query: str, *, fresh: bool = False) -> Lookup:
    started = time.monotonic()
    outcome = await registry.execute("find_resource", {"query": query}, replace(_ASKER, fresh=fresh))
    took = time.monotonic() - started
    data = outcome.data if isinstance(outcome.data, Mapping) else {}
    failures = list(data.get("failures") or [])
    if not outcome.ok or failures:
        problem = outcome.error or "; ".join(str(f) for f in failures[:3])
        return Lookup(INF, int(data.get("total") or 0), problem)
    return Lookup(took, int(data.get("total") or 0))


def _listings(toolset: Toolset) -> int:
    """Listings one unscoped lookup over every kind asks for: every (source, target, kind)."""
    estate = toolset.estate
    if estate is None:
        return 0
    return sum(len(source.targets(kind)) for source in estate.sources for kind in source.kinds())


@dataclass(frozen=True)
class ColdRun:
    """One lookup on a toolset just built, and what the fakes received for it."""

    lookup: Lookup
    started: float
    build_s: float
    calls: tuple[FakeCall, ...]

    def last_request_s(self) -> dict[str, float]:
        """Per provider: how long after the call started its last request reached the fakes."""
        out: dict[str, float] = {}
        for call in self.calls:
            out[call.provider] = max(out.get(call.provider, 0.0), call.at - self.started)
        return out


async def _cold(fakes: _FakesProcess, config: ToolsConfig, runs: int) -> tuple[ColdRun, list[ColdRun], int]:
    """The first lookup of a toolset just built, then ``runs`` with every cache bypassed (a listing's TTL ran out,
    or Refresh), each a second apart from the previous one's last request so the budgets' windows have slid."""
    out: list[ColdRun] = []
    began = time.monotonic()
    toolset = await build_toolset(config)
    build_s = time.monotonic() - began
    settle_after_startup()  # as `botgateway run` does once it has built everything, before the first question
    registry = _registry(config, toolset)
    quiet_from = 0.0
    try:
        listings = _listings(toolset)
        for i in range(runs + 1):
            await asyncio.sleep(max(0.0, quiet_from + 1.05 - time.monotonic()))  # pacing: budgets' windows apart
            started = time.monotonic()
            lookup = await _lookup(registry, COLD_QUERY, fresh=i > 0)
            calls = tuple(await fakes.take())
            quiet_from = max((c.at for c in calls), default=time.monotonic())
            out.append(ColdRun(lookup, started, build_s, calls))
    finally:
        registry.close()
        await toolset.aclose()
    return out[0], out[1:], listings


async def _warm(fakes: _FakesProcess, config: ToolsConfig, calls: int) -> tuple[list[Lookup], int, list[FakeCall],
                                                                               dict[tuple[str, str, str], Any]]:
    """One unmeasured lookup to fill the caches, then ``calls`` timed ones; the requests they made past the first,
    and the limits of every API the sources budget (their ``limit_of``)."""
    toolset = await build_toolset(config)
    registry = _registry(config, toolset)
    try:
        await _lookup(registry, COLD_QUERY)
        filled = await fakes.take()
        lookups = [await _lookup(registry, WARM_QUERIES[i % len(WARM_QUERIES)]) for i in range(calls)]
        limits = _limits(toolset, filled)
    finally:
        registry.close()
        await toolset.aclose()
    return lookups, len(await fakes.take()), filled, limits


def _limits(toolset: Toolset, calls: Iterable[FakeCall]) -> dict[tuple[str, str, str], Any]:
    """(provider, product, api) → the source's ``RateLimit``, or ``None`` where no estate source budgets it."""
    sources = {s.name: s for s in (toolset.estate.sources if toolset.estate else []) if hasattr(s, "limit_of")}
    out: dict[tuple[str, str, str], Any] = {}
    for call in calls:
        key = (call.provider, call.product, call.api)
        source = sources.get(call.provider)
        if key not in out:
            known = source is not None and call.product in source.products  # type: ignore[attr-defined]
            out[key] = source.limit_of(call.product, call.api) if known else None  # type: ignore[union-attr]
    return out


# --- the QPS check ---------------------------------------------------------------------------------


def max_in_window(times: Iterable[float], window_s: float = 1.0) -> int:
    """The most of ``times`` that fall in any half-open window ``[t, t + window_s)``."""
    ordered = sorted(times)
    best = first = 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= window_s:
            first += 1
        best = max(best, last - first + 1)
    return best


@dataclass(frozen=True)
class ApiWindow:
    """One API at one (provider, account, region): its busiest second against its documented limit."""

    provider: str
    account: str
    region: str
    product: str
    api: str
    calls: int
    """Requests over the whole scenario."""
    max_1s: int
    """The most in any one-second window."""
    allowed: int | None
    """Rate + burst of the source's ``limit_of`` (a token bucket's most in one second); ``None``: not budgeted."""

    @property
    def ok(self) -> bool:
        """Within the limit (an API no estate source budgets is not judged)."""
        return self.allowed is None or self.max_1s <= self.allowed

    @property
    def use(self) -> float:
        """The busiest second's share of the limit."""
        return self.max_1s / self.allowed if self.allowed else 0.0

    def where(self) -> str:
        """``aliyun acct0/cn-hangzhou slb DescribeLoadBalancerAttribute``."""
        return f"{self.provider} {self.account}/{self.region or 'global'} {self.product} {self.api}"


def api_windows(calls: Iterable[FakeCall], limits: Mapping[tuple[str, str, str], Any]) -> list[ApiWindow]:
    """Every (provider, account, region, product, api) the fakes saw, busiest share of its limit first."""
    grouped: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(list)
    for c in calls:
        grouped[(c.provider, c.account, c.region, c.product, c.api)].append(c.at)
    out = []
    for (provider, account, region, product, api), times in grouped.items():
        limit = limits.get((provider, product, api))
        allowed = None if limit is None else int(limit.rate_per_s + limit.burst)
        out.append(ApiWindow(provider, account, region, product, api, len(times), max_in_window(times), allowed))
    return sorted(out, key=lambda w: (-w.use, -w.max_1s, w.where()))


# --- the scenario ----------------------------------------------------------------------------------


def _ms(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v * 1000.0 if isinstance(v, float) and k != "n" else v) for k, v in summary.items()}


async def run_estate_scenario(settings: BenchSettings, scenario: Scenario, folder: Path) -> dict[str, Any]:
    """Cold and warm lookups over the configured estate, then over one account × one region; the report section.

    The gateway's own logs go to ``folder/gateway.log`` (this process is the bench's: its output is the report).
    """
    providers, accounts, regions = settings.estate_providers, settings.estate_accounts, settings.estate_regions
    folder.mkdir(parents=True, exist_ok=True)
    configure_logging(LogConfig(level="info", format="json", file=str(folder / "gateway.log")))
    load_before = list(os.getloadavg())
    fakes = _FakesProcess(providers, accounts, settings.estate_delay_ms / 1000.0)
    try:
        endpoints = await fakes.start()
        wide = tools_config(endpoints, accounts=accounts, regions=regions)
        narrow = tools_config(endpoints, accounts=1, regions=1)
        first, cold, listings = await _cold(fakes, wide, settings.estate_cold_runs)
        warm, warm_requests, filled, limits = await _warm(fakes, wide, settings.estate_warm_calls)
        base_first, base_cold, base_listings = await _cold(fakes, narrow, settings.estate_cold_runs)
        base_warm, _, _, _ = await _warm(fakes, narrow, max(1, settings.estate_warm_calls // 4))
    finally:
        await fakes.stop()
    windows = api_windows([c for run in cold for c in run.calls] + filled, limits)
    base_windows = api_windows([c for run in base_cold for c in run.calls], limits)
    last = defaultdict(list)
    for run in cold:
        for provider, at in run.last_request_s().items():
            last[provider].append(at)
    return {
        "scenario": {"name": scenario.name, "platform": "estate", "mode": scenario.mode, "n": scenario.n,
                     "arrival": scenario.arrival},
        "shape": {"providers": list(providers), "accounts": accounts, "regions": regions, "listings": listings,
                  "baseline_listings": base_listings},
        "delay_ms": settings.estate_delay_ms,
        "cold_s": summarize([r.lookup.seconds for r in cold]),
        "first_lookup_s": first.lookup.seconds,
        "baseline_first_lookup_s": base_first.lookup.seconds,
        "cold_runs_s": [r.lookup.seconds for r in cold],
        "baseline_cold_runs_s": [r.lookup.seconds for r in base_cold],
        "baseline_cold_s": summarize([r.lookup.seconds for r in base_cold]),
        "warm_ms": _ms(summarize([w.seconds for w in warm])),
        "baseline_warm_ms": _ms(summarize([w.seconds for w in base_warm])),
        "build_s": summarize([r.build_s for r in cold]),
        "requests_per_cold_lookup": summarize([float(len(r.calls)) for r in cold]),
        "last_request_s": {p: summarize(v) for p, v in sorted(last.items())},
        "found": sorted({r.lookup.found for r in cold}),
        "warm_requests": warm_requests,
        "apis": [{**asdict(w), "ok": w.ok} for w in windows],
        "baseline_apis": [{**asdict(w), "ok": w.ok} for w in base_windows],
        "failures": [{"run": i, "problem": r.lookup.problem} for i, r in enumerate(cold) if r.lookup.problem]
                    + [{"run": f"warm {i}", "problem": w.problem} for i, w in enumerate(warm) if w.problem],
        "loadavg_before": load_before,
        "loadavg_after": list(os.getloadavg()),
    }


# --- goals and presentation ------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "∞" if value is None or value == INF else f"{value:.2f}"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or value == INF or base in (INF, 0):
        return "—"
    return f"×{value / base:.2f}"


def estate_goals(result: Mapping[str, Any]) -> list[Goal]:
    """Issue 27's three goals for the fan-out."""
    cold, base = result["cold_s"]["p95"], result["baseline_cold_s"]["p95"]
    warm, base_warm = result["warm_ms"]["p95"], result["baseline_warm_ms"]["p95"]
    finite = cold is not None and cold != INF and result["delay_ms"] > 0
    trips = f", {cold * 1000 / result['delay_ms']:.1f} round trips of {result['delay_ms']:g} ms" if finite else ""
    shape = "one account × one region"
    cold_text = f"{_s(cold)} s ({_ratio(cold, base)} {shape}'s {_s(base)} s{trips})"
    warm_text = f"{_s(warm)} ms ({_ratio(warm, base_warm)} {shape}'s {_s(base_warm)} ms)"
    every = [*result["apis"], *result["baseline_apis"]]
    over = [w for w in every if not w["ok"]]
    judged = [w for w in every if w["allowed"]]
    busiest = max(judged, key=lambda w: w["max_1s"] / w["allowed"], default=None)
    if over:
        qps_text = "; ".join(f"{_where(w)}: {w['max_1s']} in 1 s, allowed {w['allowed']}" for w in over[:4])
    elif busiest is not None:
        qps_text = f"busiest {_where(busiest)}: {busiest['max_1s']} in 1 s of {busiest['allowed']} allowed"
    else:
        qps_text = "no budgeted API called"
    return [
        Goal(f"cold find_resource p95 ≤ {COLD_P95_GOAL_S:.2f} s", cold is not None and cold <= COLD_P95_GOAL_S,
             cold_text),
        Goal(f"warm find_resource p95 ≤ {WARM_P95_GOAL_S * 1000:.0f} ms",
             warm is not None and warm <= WARM_P95_GOAL_S * 1000, warm_text),
        Goal("no API past its documented QPS (+ burst) in any second", not over and bool(judged), qps_text),
    ]


def _where(window: Mapping[str, Any]) -> str:
    return f"{window['provider']} {window['account']}/{window['region'] or 'global'} {window['api']}"


def estate_table(results: Sequence[Mapping[str, Any]]) -> Table:
    """One row per estate scenario: cold and warm latencies against the same run's one-target baseline."""
    delay = results[0]["delay_ms"]
    table = Table(title=f"estate: find_resource over providers × accounts × regions × every kind, fakes answering in "
                        f"{delay:g} ms · baseline: one account × one region, same run", title_justify="left")
    columns = ["scenario", "listings", "cold p50 / p95 / max s", "baseline cold p95 s", "cold ratio",
               "warm p50 / p95 / max ms", "baseline warm p95 ms", "warm ratio", "requests / cold lookup",
               "busiest API second", "load before → after"]
    for name in columns:
        table.add_column(name, justify="left" if name == "scenario" else "right")
    for r in results:
        cold, warm = r["cold_s"], r["warm_ms"]
        judged = [w for w in r["apis"] if w["allowed"]]
        busiest = max(judged, key=lambda w: w["max_1s"] / w["allowed"], default=None)
        table.add_row(
            r["scenario"]["name"], f"{r['shape']['listings']} (vs {r['shape']['baseline_listings']})",
            " / ".join(_s(cold[k]) for k in ("p50", "p95", "max")), _s(r["baseline_cold_s"]["p95"]),
            _ratio(cold["p95"], r["baseline_cold_s"]["p95"]),
            " / ".join(_s(warm[k]) for k in ("p50", "p95", "max")), _s(r["baseline_warm_ms"]["p95"]),
            _ratio(warm["p95"], r["baseline_warm_ms"]["p95"]), _s(r["requests_per_cold_lookup"]["p50"]),
            "—" if busiest is None else f"{busiest['max_1s']} / {busiest['allowed']}",
            f"{r['loadavg_before'][0]:.2f} → {r['loadavg_after'][0]:.2f}",
        )
    return table


def estate_lines(result: Mapping[str, Any], *, top: int = 8) -> list[str]:
    """Where the cold time went (each provider's last request), the busiest APIs, and the failures."""
    last = ", ".join(f"{p} {_s(s['p50'])} s (max {_s(s['max'])})" for p, s in result["last_request_s"].items())
    build = result["build_s"]
    lines = [f"  last request reached the fakes, after the call started (p50): {last}; toolset built in "
             f"{_s(build['p50'])} s (not in the latency); warm calls made {result['warm_requests']} requests",
             f"  first lookup after start (clients new, not judged): {_s(result.get('first_lookup_s'))} s "
             f"(one account × one region: {_s(result.get('baseline_first_lookup_s'))} s); "
             "cold runs after it bypass every cache, as when a listing's TTL has run out or on Refresh"]
    judged = [w for w in result["apis"] if w["allowed"]]
    shown = sorted(judged, key=lambda w: -w["max_1s"] / w["allowed"])[:top]
    lines += [f"  {'[red]' if not w['ok'] else ''}{_where(w)}: {w['max_1s']} in the busiest second of "
              f"{w['allowed']} allowed, {w['calls']} calls{'[/]' if not w['ok'] else ''}" for w in shown]
    unbudgeted = sorted({f"{w['provider']} {w['api']}" for w in result["apis"] if w["allowed"] is None})
    if unbudgeted:
        lines.append(f"  not budgeted by an estate source (not judged): {', '.join(unbudgeted)}")
    if result["failures"]:
        shown_failures = "; ".join(f"#{f['run']}: {f['problem'][:120]}" for f in result["failures"][:3])
        lines.append(f"  [yellow]{len(result['failures'])} failed lookups[/] (∞ in every percentile): {shown_failures}")
    return lines


def estate_progress(result: Mapping[str, Any], took: float) -> str:
    """The progress line after the scenario."""
    return (f"{result['scenario']['name']} done in {took:.0f} s: cold p95 {_s(result['cold_s']['p95'])} s, "
            f"warm p95 {_s(result['warm_ms']['p95'])} ms, {len(result['failures'])} failed lookups")
