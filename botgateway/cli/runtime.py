"""Building the runtime: the core's parts and the concrete tools, wired from a :class:`Config`.

The concrete tools (:mod:`tools`) are imported here, lazily so that
``check-config`` and ``--help`` stay fast; the adapters are built by
:mod:`botgateway.cli.run` from the runtime.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from botgateway.config import Config
from botgateway.tooling import Tool, ToolRegistry

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from botgateway.alerts.desk import AlertDesk
    from botgateway.approvals import ApprovalDesk
    from botgateway.budget import RateBudget
    from botgateway.fleet.directory import FleetDirectory
    from botgateway.fleet.handoff import Handoff
    from botgateway.fleet.lease import ConversationLeases
    from botgateway.fleet.lines import RedisLines
    from botgateway.fleet.redis_fleet import RedisFleet
    from botgateway.fleet.redis_handoff import RedisHandoff
    from botgateway.gateway import Gateway
    from botgateway.history import Memory, Summarizer
    from botgateway.http import HttpServer, Readiness
    from botgateway.loop import ToolLoop
    from botgateway.model import ModelChain
    from botgateway.schedules.runner import ScheduleRunner
    from botgateway.sink import FleetLines
    from botgateway.stores.base import Store
    from botgateway.telemetry import PrometheusTelemetry
    from botgateway.usage import UsageRecorder

__all__ = ["LateParts", "Runtime", "build_runtime", "tool_registry"]

log = structlog.get_logger(__name__)


def tool_registry(config: Config, tools: Iterable[Tool]) -> ToolRegistry:
    """``tools`` in a registry with the configured timeout, result size cap, per-round cap and threads for blocking tools."""
    return ToolRegistry(
        tools,
        default_timeout_s=config.tools.default_timeout_s,
        max_result_chars=config.tools.max_result_chars,
        max_calls_per_round=config.tools.max_calls_per_round,
        sync_workers=config.tools.sync_workers,
    )


@dataclass
class LateParts:
    """What exists only once the adapters are up; the HTTP routes mounted before then read it per request."""

    alert_desk: AlertDesk | None = None
    """The alert desk (``/alerts/alertmanager`` answers 503 until it is set)."""
    schedules: ScheduleRunner | None = None
    """The schedule runner, when schedules are configured."""


@dataclass
class Runtime:
    """Everything a command or adapter needs, built once from the config."""

    config: Config
    """The validated configuration."""
    store: Store
    """Durable state."""
    memory: Memory
    """Conversation history with compression."""
    llm: ModelChain
    """The model: the primary endpoint, its fallbacks and the routes (``llm.fallbacks``, ``llm.routes``)."""
    tools: ToolRegistry
    """Tools offered to the model."""
    toolset: Any
    """The concrete toolset (providers, MCP sessions)."""
    loop: ToolLoop
    """The streaming tool loop."""
    budget: RateBudget
    """Rate budgets shared by every card of the process (with Redis, by every process of the fleet)."""
    gateway: Gateway
    """Turn scheduling, dedupe and cards."""
    model_label: str
    """Shown in the card footer ("demo model" for the offline stand-in)."""
    http: HttpServer | None = None
    """The gateway's HTTP server (probes, ``/metrics``), when ``http.enabled`` or ``metrics.enabled``; not started yet."""
    readiness: Readiness | None = None
    """What ``/readyz`` reports (the runner adds the adapters and the draining), with the HTTP server."""
    worker_index: int | None = None
    """This process's index among the worker processes of ``botgateway run --workers``; None when it is the only one."""
    handoff: Handoff | None = None
    """The fleet's queue of questions moved by draining processes (``memory.store: redis``); ``run`` starts taking
    them once its adapters are up. None with SQLite (one process)."""
    late: LateParts = field(default_factory=lambda: LateParts())
    """The alert desk and the schedules, which ``run`` starts once its adapters are up."""
    web: Any = None
    """The web adapter (:class:`adapters.web.WebAdapter`: the HTTP API), its routes mounted on :attr:`http`, when
    ``web.enabled`` and the HTTP server runs; ``run`` starts it with the other adapters."""
    lines: FleetLines | None = None
    """The fleet's channel lines (``memory.store: redis``): a Slack channel's answers on every replica take its new
    messages in the order they were asked. None with SQLite (one process)."""


async def open_tool_plane(stack: AsyncExitStack, config: Config) -> tuple[Store, Any, ToolRegistry]:
    """The Store, the toolset and the live tool registry over them, each closed by ``stack`` in reverse order."""
    from botgateway.stores import open_store
    from tools.catalog import build_toolset

    store = await open_store(config.memory, audit_retention_days=config.audit.retention_days)
    stack.push_async_callback(store.close)
    toolset = await build_toolset(config.tools)
    stack.push_async_callback(toolset.aclose)
    registry = tool_registry(config, toolset.tools)
    stack.callback(registry.close)
    toolset.attach(registry)  # MCP servers that come up late add their tools to this live registry
    return store, toolset, registry


@asynccontextmanager
async def build_runtime(config: Config, *, worker_index: int | None = None) -> AsyncIterator[Runtime]:
    """Build the runtime; everything is closed in reverse order on exit.

    ``worker_index``: this process is that worker of ``botgateway run --workers`` (its instance id says so, and its
    HTTP listeners share their ports with the other workers).
    """
    from botgateway.approvals import ApprovalDesk
    from botgateway.instance import claim_instance_id

    async with AsyncExitStack() as stack:
        store, toolset, registry = await open_tool_plane(stack, config)
        llm, model_label = await _model(stack, config, registry, toolset)
        # Kept across restarts, so a restarted process closes the cards it left at once (recovery at start).
        claim = claim_instance_id(config.gateway, config.memory, worker_index=worker_index)
        stack.callback(claim.release)
        fleet = _fleet_parts(stack, config, store, claim.instance_id)
        # Calls waiting for an approver (codes reserved fleet-wide); the gateway checks who may decide.
        desk = ApprovalDesk(shared=fleet.directory if fleet is not None else None)
        telemetry = _telemetry(config)
        usage = _usage(stack, config, store, telemetry)  # closed after the gateway and the memory, before the store
        memory, loop = _loop(config, store, llm, registry, desk, fleet.leases if fleet is not None else None,
                             summarizer=usage.summarizer(llm, llm.model))
        stack.push_async_callback(memory.aclose)  # drains the history writer: after the gateway, before the store
        late = LateParts()
        budget = _budget(stack, config, claim.instance_id)  # closed after the gateway: its cards release theirs
        http, readiness = _http(stack, config, store, telemetry, late, budget, reuse_port=worker_index is not None)
        web = _web(config, http, store, registry, memory, fleet, readiness=readiness, budget=budget,
                   instance_id=claim.instance_id)
        observers = [*([telemetry] if telemetry is not None else []), usage]
        gateway = _gateway(config, claim.instance_id, loop=loop, store=store, budget=budget, model_label=model_label,
                           observers=observers, memory=memory, approvals=desk, fleet=fleet)
        stack.push_async_callback(gateway.aclose)
        await gateway.start()  # heartbeats before any adapter can open a card
        yield Runtime(
            config=config, store=store, memory=memory, llm=llm, tools=registry, toolset=toolset, loop=loop,
            budget=budget, gateway=gateway, model_label=model_label, http=http, readiness=readiness,
            worker_index=worker_index, handoff=fleet.handoff if fleet is not None else None, late=late, web=web,
            lines=fleet.lines if fleet is not None else None,
        )


def _budget(stack: AsyncExitStack, config: Config, instance_id: str) -> RateBudget:
    """The rate budgets: one for the whole fleet in Redis with ``memory.store: redis``, else this process's own."""
    from botgateway.budget import RateBudget

    if config.memory.store != "redis":
        return RateBudget()
    from botgateway.budget import RedisLedger, SharedLedger

    gateway = config.gateway
    redis = RedisLedger.connect(config.memory.redis_url.get_secret_value(), prefix=config.memory.redis_prefix,
                                instance_id=instance_id, reservation_ttl_s=gateway.instance_ttl_s)
    ledger = SharedLedger(redis, share=gateway.replicas * gateway.workers, refresh_s=gateway.heartbeat_s)
    stack.push_async_callback(ledger.aclose)
    return RateBudget(ledger=ledger)


@dataclass(frozen=True)
class _FleetParts:
    """The fleet's pieces that the memory and the approval desk take before the gateway exists."""

    client: aioredis.Redis
    """The fleet's own connections (closed by the exit stack)."""
    prefix: str
    """The deployment's key prefix."""
    instance_id: str
    """This process's id."""
    directory: FleetDirectory
    """Who holds which turn, conversation and approval code."""
    leases: ConversationLeases
    """The conversation leases (their tokens fence the memory's writes)."""
    handoff: RedisHandoff
    """The queue of questions moved by draining processes (closed by the exit stack, after the gateway)."""
    lines: RedisLines
    """The fleet's channel lines (closed by the exit stack, after the adapters)."""

    def join(self, memory: Memory) -> RedisFleet:
        """The fleet the gateway uses: the parts, the control channel, and the hand-over once ``memory`` settles."""
        from botgateway.fleet.control import ControlChannel
        from botgateway.fleet.redis_fleet import RedisFleet

        control = ControlChannel(self.client, self.prefix, self.instance_id)
        return RedisFleet(control, self.directory, self.leases, settle=memory.settle)


def _fleet_parts(stack: AsyncExitStack, config: Config, store: Store, instance_id: str) -> _FleetParts | None:
    """With ``memory.store: redis``, the fleet's connections, directory, leases and queue of moved questions; with
    SQLite, none (one process)."""
    if config.memory.store != "redis":
        return None
    from botgateway.fleet.directory import FleetDirectory
    from botgateway.fleet.lease import ConversationLeases
    from botgateway.fleet.lines import RedisLines
    from botgateway.fleet.redis_fleet import fleet_client
    from botgateway.fleet.redis_handoff import RedisHandoff

    client = fleet_client(config.memory.redis_url.get_secret_value(), instance_id)
    stack.push_async_callback(client.aclose)
    prefix, gateway = config.memory.redis_prefix, config.gateway
    # A lease lasts as long as its process counts as live, and is renewed with each heartbeat.
    leases = ConversationLeases(client, prefix, instance_id, ttl_s=gateway.instance_ttl_s, renew_s=gateway.heartbeat_s)
    directory = FleetDirectory(client, prefix, instance_id, live=store.live_instances)
    handoff = RedisHandoff(client, prefix, instance_id, live=store.live_instances)
    stack.push_async_callback(handoff.aclose)
    # A dead process's places leave its channels' lines as its instance stops counting as live.
    lines = RedisLines(client, prefix, ttl_s=gateway.instance_ttl_s)
    stack.push_async_callback(lines.aclose)
    return _FleetParts(client, prefix, instance_id, directory, leases, handoff, lines)


def _loop(
    config: Config, store: Store, llm: ModelChain, registry: ToolRegistry, desk: ApprovalDesk,
    leases: ConversationLeases | None, *, summarizer: Summarizer,
) -> tuple[Memory, ToolLoop]:
    """The conversation memory (its writes fenced by ``leases`` in a fleet) and the tool loop over it, as configured."""
    from botgateway.access import effective_policy
    from botgateway.history import Memory
    from botgateway.loop import ToolLoop

    memory = Memory(
        store,
        max_history_tokens=config.memory.max_history_tokens,
        keep_recent_turns=config.memory.keep_recent_turns,
        summarizer=summarizer,
        cached_conversations=config.memory.history_cache_size,
        fences=leases.token if leases is not None else None,
    )
    loop = ToolLoop(
        llm,
        registry,
        memory,
        max_rounds=config.llm.max_rounds,
        system_prompt=config.llm.system_prompt,
        turn_timeout_s=config.llm.turn_timeout_s,
        approvals=desk,
        approval_timeout_s=effective_policy(config.access).approvals.timeout_s,
    )
    return memory, loop


async def _model(stack: AsyncExitStack, config: Config, registry: ToolRegistry, toolset: Any) -> tuple[ModelChain, str]:
    """The model (the primary, its fallbacks, the routes) and its footer label; the offline demo model is started
    when no model is configured."""
    from botgateway.model import build_chain

    base_url: str | None = None
    model_label = config.llm.resolved_model
    if config.llm.resolved_provider == "demo":
        from tools.demo.model import start_demo_model

        base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
        model_label = "demo model"
        log.info("llm.demo", note="no LLM key configured: using the built-in offline demo model")
    llm = build_chain(config.llm, base_url=base_url)
    stack.push_async_callback(llm.aclose)
    return llm, model_label


def _usage(stack: AsyncExitStack, config: Config, store: Store, telemetry: PrometheusTelemetry | None) -> UsageRecorder:
    """The recorder of every model call's usage (priced by ``usage.prices``, counted by ``telemetry``), written
    behind the answers."""
    from botgateway.usage import Pricing, UsageRecorder, UsageWriter

    recorder = UsageRecorder(UsageWriter(store), Pricing.from_config(config.usage),
                             listeners=[telemetry] if telemetry is not None else [])
    stack.push_async_callback(recorder.aclose)
    return recorder


def _telemetry(config: Config) -> PrometheusTelemetry | None:
    """The turn observer counting into the Prometheus registry, when ``metrics.enabled``."""
    if not config.metrics.enabled:
        return None
    from botgateway.telemetry import PrometheusTelemetry

    return PrometheusTelemetry()


def _http(
    stack: AsyncExitStack, config: Config, store: Store, telemetry: PrometheusTelemetry | None, late: LateParts,
    budget: RateBudget, *, reuse_port: bool,
) -> tuple[HttpServer | None, Readiness | None]:
    """The gateway's HTTP server with the probes (and ``/metrics``, with the rate budgets' limits; the alert receiver),
    when anything is to be served; started by ``run``."""
    if not (config.http.enabled or telemetry is not None or config.alerts.enabled):
        return None, None
    from botgateway.http import HttpServer, Readiness, metrics_routes, probe_routes

    server = HttpServer(config.http.host, config.http.port, reuse_port=reuse_port)
    stack.push_async_callback(server.aclose)
    readiness = Readiness(store)
    server.add_routes(probe_routes(readiness))
    if telemetry is not None:
        # Set by the supervisor of --workers for its workers only (see botgateway.http.metrics).
        shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR") if reuse_port else None
        server.add_routes(metrics_routes(telemetry.registry, multiprocess_dir=shared or None, budget=budget))
    if config.alerts.enabled:
        from botgateway.http.alerts import alert_routes

        server.add_routes(alert_routes(config.alerts, lambda: late.alert_desk))
    return server, readiness


def _gateway(
    config: Config, instance_id: str, *, loop: ToolLoop, store: Store, budget: RateBudget, model_label: str,
    observers: list[Any], memory: Memory, approvals: ApprovalDesk, fleet: _FleetParts | None,
) -> Gateway:
    """The gateway over the built parts (in a fleet, joined to it once ``memory`` settles)."""
    from botgateway.gateway import Gateway

    return Gateway(
        instance_id=instance_id,
        loop=loop,
        store=store,
        budget=budget,
        config=config,
        model_label=model_label,
        observers=observers,
        clear_history=memory.clear,
        approvals=approvals,
        fleet=fleet.join(memory) if fleet is not None else None,
        handoff=fleet.handoff if fleet is not None else None,
    )


def _web(
    config: Config, http: HttpServer | None, store: Store, registry: ToolRegistry, memory: Memory,
    fleet: _FleetParts | None, *, readiness: Readiness | None, budget: RateBudget, instance_id: str,
) -> Any:
    """The web adapter with the API mounted on the HTTP server, and the console beside it (its sessions found by the
    API's auth), when ``web.enabled`` and the server runs. In a fleet, a conversation is not cleared while another
    process runs one of its turns (the fleet's directory says so)."""
    from botgateway.config.web import web_served

    if http is None or not web_served(config):
        return None
    from adapters.web import WebAdapter
    from botgateway.cli.web_console import mount_web_console

    busy_elsewhere = fleet.directory.conversation_owners if fleet is not None else None
    web = WebAdapter(config, store=store, tools=registry, clear=memory.clear, busy_elsewhere=busy_elsewhere,
                     seed=memory.commit)
    web.mount(http.app)
    mount_web_console(config, http, store, readiness=readiness, budget=budget, instance_id=instance_id)
    return web
