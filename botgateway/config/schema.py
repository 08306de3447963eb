"""The whole configuration file: one section per top-level key."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from botgateway.config.access import DEFAULT_ACCESS, AccessConfig
from botgateway.config.alerts import AlertsConfig
from botgateway.config.audit import AuditConfig
from botgateway.config.card import CardConfig
from botgateway.config.limits import LimitsConfig
from botgateway.config.llm import LLMConfig, route_role_problems
from botgateway.config.platforms import AdaptersConfig
from botgateway.config.schedules import ScheduleConfig
from botgateway.config.section import Section
from botgateway.config.service import GatewayConfig, HttpConfig, LogConfig, MemoryConfig, MetricsConfig
from botgateway.config.toolset import ToolsConfig
from botgateway.config.usage import UsageConfig
from botgateway.config.web import WebConfig, web_bind_problems

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
    alerts: AlertsConfig = AlertsConfig()
    """Alertmanager's webhook and where each alert group's card goes."""
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    """Reports posted on a cron schedule."""
    usage: UsageConfig = UsageConfig()
    """Prices of the models, for the cost of each recorded model call."""
    web: WebConfig = WebConfig()
    """The HTTP API and the web console on the HTTP server: API keys, the admin password, CORS."""

    @model_validator(mode="after")
    def _alerts_and_schedules_fit(self) -> Config:
        problems = _cross_problems(self)
        if problems:
            # Raised as a ValidationError so that each problem keeps its own key path (alerts.routes[0].role).
            raise ValidationError.from_exception_data("Config", problems)
        return self


def _problem(loc: tuple[str | int, ...], message: str, value: Any) -> InitErrorDetails:
    # The message goes in as context: a template would read braces in a value as its own.
    error = PydanticCustomError("cross_section", "{message}", {"message": message})
    return InitErrorDetails(type=error, loc=loc, input=value)


def _dotted(loc: tuple[str | int, ...]) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else p for p in loc).replace(".[", "[")


def _cross_problems(config: Config) -> list[InitErrorDetails]:
    """Alert routes, schedules and model routes against the rest of the file: unique names, known roles, adapters
    not disabled."""
    # The policy's roles as botgateway.access.policy.effective_policy reads them (imported here it would make a cycle).
    roles = (config.access if config.access is not None else DEFAULT_ACCESS).roles
    known = ", ".join(sorted(roles)) or "none is defined"
    problems: list[InitErrorDetails] = []
    owners: list[tuple[tuple[str | int, ...], str, str, list[str]]] = [
        *((("alerts", "routes", i), r.name, r.role, r.to) for i, r in enumerate(config.alerts.routes)),
        *((("schedules", i), s.name, s.role, s.to) for i, s in enumerate(config.schedules)),
    ]
    first: dict[tuple[str, str], tuple[str | int, ...]] = {}
    for loc, name, role, destinations in owners:
        earlier = first.setdefault((str(loc[0]), name), loc)
        if earlier != loc:
            taken = f"the name is taken by {_dotted(earlier)}; names must be unique"
            problems.append(_problem((*loc, "name"), taken, name))
        if role and role not in roles:
            unknown = f"not a role under access.roles (known: {known}); define it there"
            problems.append(_problem((*loc, "role"), unknown, role))
        for j, text in enumerate(destinations):
            platform = text.strip().partition(":")[0]
            adapter = getattr(config.adapters, platform, None)
            if adapter is not None and adapter.enabled is False:
                problems.append(_problem(
                    (*loc, "to", j), f"adapters.{platform} is enabled: false, so nothing can post to this destination; "
                    "enable the adapter or remove the destination", text,
                ))
    problems += [_problem(loc, message, value) for loc, message, value in route_role_problems(config.llm, roles)]
    problems += [_problem(loc, message, value) for loc, message, value in web_bind_problems(config)]
    return problems
