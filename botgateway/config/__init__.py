"""Configuration: ``config.yaml`` loaded into pydantic models.

Strings may hold ``${VAR}`` (required) or ``${VAR:-default}``. Unknown keys and
wrong types are rejected with the key's path and a hint; secrets are
``SecretStr`` so they never print. :func:`load_config` raises
:class:`ConfigError` carrying every problem at once.

The package keeps one room per idea: the sections of the file (:mod:`.llm`,
:mod:`.service`, :mod:`.card`, :mod:`.platforms`, :mod:`.toolset`, :mod:`.alerts`,
:mod:`.schedules`, assembled in :mod:`.schema`), ``${VAR}`` substitution (:mod:`.env`), error lines
(:mod:`.problems`), loading (:mod:`.loading`), what can run as several worker
processes (:mod:`.workers`) and a card threshold no cache reaches (:mod:`.staleness`).
Import every name from here.
"""

from __future__ import annotations

from botgateway.config.access import DEFAULT_ACCESS, AccessConfig, RoleConfig
from botgateway.config.alerts import AlertRouteConfig, AlertsConfig, BasicAuthConfig
from botgateway.config.audit import AuditConfig
from botgateway.config.card import BufferPolicyConfig, CardConfig, PhasePolicy
from botgateway.config.env import substitute_env
from botgateway.config.errors import ConfigError
from botgateway.config.limits import LimitsConfig
from botgateway.config.llm import DEFAULT_SYSTEM_PROMPT, KEYLESS_PROVIDERS, PROVIDER_PRESETS, LLMConfig, ProviderName
from botgateway.config.loading import load_config, parse_config
from botgateway.config.platforms import (
    AdapterBase,
    AdaptersConfig,
    DingTalkConfig,
    SessionScope,
    SlackConfig,
    TerminalConfig,
)
from botgateway.config.problems import format_errors
from botgateway.config.schedules import ScheduleConfig
from botgateway.config.schema import Config
from botgateway.config.section import Section
from botgateway.config.service import MAX_WORKERS, GatewayConfig, HttpConfig, LogConfig, MemoryConfig, MetricsConfig
from botgateway.config.staleness import staleness_warnings
from botgateway.config.toolset import (
    TOOLSETS,
    ChartsConfig,
    CloudAccount,
    CloudProviderConfig,
    InventoryConfig,
    KubeContextConfig,
    KubernetesConfig,
    McpServerConfig,
    PrometheusConfig,
    ToolsConfig,
)
from botgateway.config.workers import SLACK_SOCKET_CONNECTIONS, worker_problems, worker_warnings

__all__ = [
    "DEFAULT_ACCESS",
    "DEFAULT_SYSTEM_PROMPT",
    "KEYLESS_PROVIDERS",
    "MAX_WORKERS",
    "PROVIDER_PRESETS",
    "SLACK_SOCKET_CONNECTIONS",
    "TOOLSETS",
    "AccessConfig",
    "AdapterBase",
    "AdaptersConfig",
    "AlertRouteConfig",
    "AlertsConfig",
    "AuditConfig",
    "BasicAuthConfig",
    "BufferPolicyConfig",
    "CardConfig",
    "ChartsConfig",
    "CloudAccount",
    "CloudProviderConfig",
    "Config",
    "ConfigError",
    "DingTalkConfig",
    "GatewayConfig",
    "HttpConfig",
    "InventoryConfig",
    "KubeContextConfig",
    "KubernetesConfig",
    "LLMConfig",
    "LimitsConfig",
    "LogConfig",
    "McpServerConfig",
    "MemoryConfig",
    "MetricsConfig",
    "PhasePolicy",
    "PrometheusConfig",
    "ProviderName",
    "RoleConfig",
    "ScheduleConfig",
    "Section",
    "SessionScope",
    "SlackConfig",
    "TerminalConfig",
    "ToolsConfig",
    "format_errors",
    "load_config",
    "parse_config",
    "staleness_warnings",
    "substitute_env",
    "worker_problems",
    "worker_warnings",
]
