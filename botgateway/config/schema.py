"""The whole configuration file: one section per top-level key."""

from __future__ import annotations

from botgateway.config.access import AccessConfig
from botgateway.config.audit import AuditConfig
from botgateway.config.card import CardConfig
from botgateway.config.limits import LimitsConfig
from botgateway.config.llm import LLMConfig
from botgateway.config.platforms import AdaptersConfig
from botgateway.config.section import Section
from botgateway.config.service import GatewayConfig, HttpConfig, LogConfig, MemoryConfig, MetricsConfig
from botgateway.config.toolset import ToolsConfig

__all__ = ["Config"]


class Config(Section):
    """The whole configuration file."""

    log: LogConfig = LogConfig()
    """Logging."""
    llm: LLMConfig = LLMConfig()
    """The model."""
    memory: MemoryConfig = MemoryConfig()
    """History and state."""
    card: CardConfig = CardConfig()
    """The card."""
    gateway: GatewayConfig = GatewayConfig()
    """Turn scheduling and access."""
    adapters: AdaptersConfig = AdaptersConfig()
    """Platforms."""
    tools: ToolsConfig = ToolsConfig()
    """Tools."""
    http: HttpConfig = HttpConfig()
    """The gateway's HTTP server (probes, metrics)."""
    metrics: MetricsConfig = MetricsConfig()
    """Metrics."""
    access: AccessConfig | None = None
    """Who may ask what; without it the safe default of :data:`~botgateway.config.access.DEFAULT_ACCESS` applies."""
    limits: LimitsConfig = LimitsConfig()
    """Per-asker limits (the access policy's roles override them) and the fair share of turn slots."""
    audit: AuditConfig = AuditConfig()
    """Audit records and their retention."""
