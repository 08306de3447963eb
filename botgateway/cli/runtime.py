"""Building the runtime: the core's parts and the concrete tools, wired from a :class:`Config`.

The concrete tools (:mod:`tools`) are imported here, lazily so that
``check-config`` and ``--help`` stay fast; the adapters are built by
:mod:`botgateway.cli.run` from the runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from botgateway.config import Config, ConfigError
from botgateway.tooling import Tool, ToolRegistry

if TYPE_CHECKING:
    from botgateway.approvals import ApprovalDesk
    from botgateway.budget import RateBudget
    from botgateway.gateway import Gateway
    from botgateway.llm import LLMClient
    from botgateway.loop import ToolLoop
    from botgateway.memory import Memory
    from botgateway.stores.base import Store
    from botgateway.telemetry import MetricsServer, TurnObserver

__all__ = ["Runtime", "build_runtime", "tool_registry"]

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
class Runtime:
    """Everything a command or adapter needs, built once from the config."""

    config: Config
    """The validated configuration."""
    store: Store
    """Durable state."""
    memory: Memory
    """Conversation history with compression."""
    llm: LLMClient
    """The model client."""
    tools: ToolRegistry
    """Tools offered to the model."""
    toolset: Any
    """The concrete toolset (providers, MCP sessions)."""
    loop: ToolLoop
    """The streaming tool loop."""
    budget: RateBudget
    """Rate budgets shared by every card of the process."""
    gateway: Gateway
    """Turn scheduling, dedupe and cards."""
    model_label: str
    """Shown in the card footer ("demo model" for the offline stand-in)."""
    metrics: MetricsServer | None = None
    """The ``/metrics`` endpoint, when ``metrics.enabled``."""


@asynccontextmanager
async def build_runtime(config: Config) -> AsyncIterator[Runtime]:
    """Build the runtime; everything is closed in reverse order on exit."""
    from botgateway.approvals import ApprovalDesk
    from botgateway.budget import RateBudget
    from botgateway.gateway import Gateway
    from botgateway.instance import claim_instance_id
    from botgateway.stores import open_store
    from tools.catalog import build_toolset

    async with AsyncExitStack() as stack:
        store = await open_store(config.memory, audit_retention_days=config.audit.retention_days)
        stack.push_async_callback(store.close)
        toolset = await build_toolset(config.tools)
        stack.push_async_callback(toolset.aclose)
        registry = tool_registry(config, toolset.tools)
        stack.callback(registry.close)
        toolset.attach(registry)  # MCP servers that come up late add their tools to this live registry
        llm, model_label = await _model(stack, config, registry, toolset)
        desk = ApprovalDesk()  # calls waiting for an approver; the gateway checks who may decide
        memory, loop = _loop(config, store, llm, registry, desk)
        stack.push_async_callback(memory.aclose)  # drains the history writer: after the gateway, before the store
        budget = RateBudget()
        telemetry, metrics_server = _telemetry(stack, config)
        # Kept across restarts, so a restarted process closes the cards it left at once (recovery at start).
        claim = claim_instance_id(config.gateway, config.memory)
        stack.callback(claim.release)
        gateway = Gateway(
            instance_id=claim.instance_id,
            loop=loop,
            store=store,
            budget=budget,
            config=config,
            model_label=model_label,
            observers=telemetry,
            clear_history=memory.clear,
            approvals=desk,
        )
        stack.push_async_callback(gateway.aclose)
        await gateway.start()  # heartbeats before any adapter can open a card
        yield Runtime(
            config=config,
            store=store,
            memory=memory,
            llm=llm,
            tools=registry,
            toolset=toolset,
            loop=loop,
            budget=budget,
            gateway=gateway,
            model_label=model_label,
            metrics=metrics_server,
        )


def _loop(config: Config, store: Store, llm: LLMClient, registry: ToolRegistry, desk: ApprovalDesk) -> tuple[Memory, ToolLoop]:
    """The conversation memory and the tool loop over it, as configured."""
    from botgateway.loop import ToolLoop
    from botgateway.memory import Memory
    from botgateway.policy import effective_policy

    memory = Memory(
        store,
        max_history_tokens=config.memory.max_history_tokens,
        keep_recent_turns=config.memory.keep_recent_turns,
        summarizer=llm.complete,
        cached_conversations=config.memory.history_cache_size,
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


async def _model(stack: AsyncExitStack, config: Config, registry: ToolRegistry, toolset: Any) -> tuple[LLMClient, str]:
    """The model client and its footer label; the offline demo model is started when no model is configured."""
    from botgateway.llm import LLMClient

    base_url: str | None = None
    model_label = config.llm.resolved_model
    if config.llm.resolved_provider == "demo":
        from tools.demo.model import start_demo_model

        base_url = await start_demo_model(stack, outcomes=registry, providers=toolset.provider_objects)
        model_label = "demo model"
        log.info("llm.demo", note="no LLM key configured: using the built-in offline demo model")
    llm = LLMClient(config.llm, base_url=base_url)
    stack.push_async_callback(llm.aclose)
    return llm, model_label


def _telemetry(stack: AsyncExitStack, config: Config) -> tuple[list[TurnObserver], MetricsServer | None]:
    """The turn observers, and the ``/metrics`` endpoint when ``metrics.enabled``."""
    if not config.metrics.enabled:
        return [], None
    from botgateway.telemetry import PrometheusTelemetry

    telemetry = PrometheusTelemetry()
    try:
        server = telemetry.serve(config.metrics.host, config.metrics.port)
    except OSError as exc:
        raise ConfigError(
            [f"metrics.port: cannot serve metrics on {config.metrics.host}:{config.metrics.port} ({exc.strerror})"]
        ) from None
    stack.callback(server.close)
    return [telemetry], server
