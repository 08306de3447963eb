"""Sections of what the model can call: the static inventory, cloud providers, Prometheus and MCP servers."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator

from botgateway.config.section import SECRET_BEARING, Section

__all__ = [
    "TOOLSETS",
    "CloudAccount",
    "CloudProviderConfig",
    "InventoryConfig",
    "KubeContextConfig",
    "KubernetesConfig",
    "McpServerConfig",
    "PrometheusConfig",
    "ToolsConfig",
]


class CloudAccount(Section):
    """One cloud account: credentials and the regions to search."""

    name: str = "default"
    """Label shown in results ("prod", "staging")."""
    access_key_id: SecretStr = SecretStr("")
    """Access key id; empty means the SDK's usual environment variables."""
    access_key_secret: SecretStr = SecretStr("")
    """Access key secret; empty means the SDK's usual environment variables."""
    regions: list[str] = Field(default_factory=list)
    """Regions to search."""
    endpoint: str | None = None
    """Override the API endpoint (private link, tests)."""


class CloudProviderConfig(Section):
    """A cloud provider's accounts."""

    enabled: bool = False
    """Offer this provider's tools to the model."""
    accounts: list[CloudAccount] = Field(default_factory=list)
    """Accounts to search, concurrently."""
    timeout_s: float = Field(10.0, gt=0)
    """Per-request timeout."""
    cache_ttl_s: float = Field(60.0, ge=0)
    """How long results are cached (0 disables)."""
    endpoints: dict[str, str] = Field(default_factory=dict)
    """Endpoint overrides per product key (``rds``, ``elbv2``, ``actiontrail``…; private links, tests); an account's
    ``endpoint`` applies to every product without one here."""
    api_qps: dict[str, float] = Field(default_factory=dict)
    """Call rate per API name or product key (``DescribeDBInstances: 5``, ``route53: 5``), per account and region,
    where the account's quota differs from the documented one the gateway assumes."""


class KubeContextConfig(Section):
    """One kubeconfig context the gateway reads (read-only)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """Label shown in results and matched by scopes (``account`` of a ``kubernetes`` scope)."""
    context: str = ""
    """The kubeconfig context to use; empty: the context named like :attr:`name`."""
    namespaces: list[str] = Field(default_factory=list)
    """Namespaces to read; empty: every namespace (cluster-wide list calls)."""


class KubernetesConfig(Section):
    """Kubernetes clusters through kubeconfig contexts (nodes, pods, workloads, services, ingresses, events)."""

    enabled: bool = False
    """Offer the Kubernetes resources."""
    kubeconfig: str = ""
    """Path of the kubeconfig file; empty: ``$KUBECONFIG`` or ``~/.kube/config``."""
    contexts: list[KubeContextConfig] = Field(default_factory=list)
    """Contexts to read, concurrently."""
    timeout_s: float = Field(10.0, gt=0)
    """Per-request timeout."""
    cache_ttl_s: float = Field(30.0, ge=0)
    """How long listings are cached (0 disables)."""
    api_qps: float = Field(20.0, gt=0)
    """Calls per second per context (the client's default rate against the API server)."""


TOOLSETS = ("servers", "network", "data", "dns", "storage", "kubernetes", "changes", "metrics", "cost")
"""Every toolset, in the order ``tools list`` shows them."""


class InventoryConfig(Section):
    """The static inventory of on-prem hosts."""

    enabled: bool = True
    """Offer the static inventory."""
    path: str = "tools/sample_inventory.yaml"
    """YAML or CSV file of hosts."""


class McpServerConfig(Section):
    """One MCP server whose tools are offered, namespaced by ``name``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    """Namespace prefix of the server's tools."""
    # Command lines, arguments and URLs often carry tokens (--api-token=…, ?key=…), so no message echoes them.
    command: Annotated[str | None, SECRET_BEARING] = None
    """stdio transport: the command to start."""
    args: Annotated[list[str], SECRET_BEARING] = Field(default_factory=list)
    """stdio transport: its arguments."""
    env: Annotated[dict[str, SecretStr], SECRET_BEARING] = Field(default_factory=dict)
    """stdio transport: extra environment."""
    url: Annotated[str | None, SECRET_BEARING] = None
    """streamable-HTTP transport: the server URL."""
    headers: Annotated[dict[str, SecretStr], SECRET_BEARING] = Field(default_factory=dict)
    """streamable-HTTP transport: request headers (tokens)."""
    allow: list[str] = Field(default_factory=list)
    """Offer only these tool names (empty: all)."""
    deny: list[str] = Field(default_factory=list)
    """Never offer these tool names."""
    timeout_s: float = Field(30.0, gt=0)
    """Per-call timeout."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("set exactly one of command (stdio) or url (streamable HTTP)")
        return self


class PrometheusConfig(Section):
    """A Prometheus server whose HTTP API the metric tools query (read-only)."""

    enabled: bool = False
    """Offer ``query_metrics`` over this server."""
    # A URL may carry basic-auth credentials (https://user:pass@…), so no message echoes it.
    url: Annotated[str, SECRET_BEARING] = ""
    """Base URL of the server (``http://prometheus:9090``), without ``/api/v1``."""
    timeout_s: float = Field(10.0, gt=0)
    """Per-request timeout."""
    headers: Annotated[dict[str, SecretStr], SECRET_BEARING] = Field(default_factory=dict)
    """Request headers (``Authorization: Bearer …`` for a protected server or a hosted one)."""

    @model_validator(mode="after")
    def _url_when_enabled(self) -> PrometheusConfig:
        if self.enabled and not self.url:
            raise ValueError("set url (http://host:9090) when prometheus is enabled")
        return self


class ChartsConfig(Section):
    """Charts drawn on the server for the metric and cost tools' answers."""

    enabled: bool = True
    """Draw a chart for each metric and cost answer (the model still gets the figures when off)."""
    timezone: str = "UTC"
    """IANA time zone of the charts' time axis (``Asia/Shanghai``)."""
    max_concurrent: int = Field(2, ge=1, le=16)
    """Charts drawn at once (each is CPU work off the event loop)."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}: use an IANA name such as 'Asia/Shanghai'") from None
        return value


class ToolsConfig(Section):
    """What the model can call."""

    default_timeout_s: float = Field(20.0, gt=0)
    """Timeout of a tool call unless the tool sets its own."""
    max_result_chars: int = Field(8000, ge=200)
    """Tool output longer than this is truncated with a note to the model."""
    max_calls_per_round: int = Field(16, ge=1, le=256)
    """Tool calls of one model round that run; the later ones are not run, and the model is told to call again with fewer."""
    sync_workers: int = Field(8, ge=1, le=64)
    """Threads for tools written as blocking functions; a call abandoned at its timeout holds one until it returns."""
    inventory: InventoryConfig = InventoryConfig()
    """Static inventory."""
    aliyun: CloudProviderConfig = CloudProviderConfig()
    """Alibaba Cloud ECS."""
    tencent: CloudProviderConfig = CloudProviderConfig()
    """Tencent Cloud CVM."""
    aws: CloudProviderConfig = CloudProviderConfig()
    """AWS EC2."""
    kubernetes: KubernetesConfig = KubernetesConfig()
    """Kubernetes contexts."""
    prometheus: PrometheusConfig = PrometheusConfig()
    """Prometheus metrics (``query_metrics``)."""
    charts: ChartsConfig = ChartsConfig()
    """Charts on the metric and cost answers."""
    toolsets: list[str] = Field(default_factory=lambda: list(TOOLSETS))
    """Toolsets offered (servers, network, data, dns, storage, kubernetes, changes, metrics, cost); each works with
    every enabled provider that has what it needs."""

    @field_validator("toolsets")
    @classmethod
    def _known_toolsets(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in TOOLSETS]
        if unknown:
            raise ValueError(f"unknown toolset {unknown[0]!r}; choose from {', '.join(TOOLSETS)}")
        return list(dict.fromkeys(value))
    mcp: list[McpServerConfig] = Field(default_factory=list)
    """MCP servers."""
