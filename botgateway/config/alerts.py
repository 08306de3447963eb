"""The ``alerts:`` section: Alertmanager's webhook, how it is authenticated, and where each alert group's card goes.

```yaml
alerts:
  token: ${ALERTS_TOKEN}
  routes:
    - match: {severity: critical}        # equality; =~ regex, != and !~ as in Alertmanager
      to: ["slack:C0OPS", "dingtalk:cid…"]
      investigate: true
      role: oncall                        # the access role the investigation runs as
    - match: {}
      to: ["dingtalk:cid…"]
```

Each route runs as the principal ``alerts:<name>``. Whether the roles and the
destinations' adapters exist is checked with the whole file
(:class:`~botgateway.config.schema.Config`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from botgateway.config.section import Section
from botgateway.destinations import parse_destination
from botgateway.matchers import parse_matchers

__all__ = ["NAME_PATTERN", "AlertRouteConfig", "AlertsConfig", "BasicAuthConfig", "valid_destinations", "valid_name"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A route's or a schedule's name: it becomes a principal (``alerts:<name>``, ``schedule:<name>``)."""


def valid_name(value: str) -> str:
    """A route's or a schedule's name, or a :class:`ValueError` saying what a name may hold."""
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError("a name is 1-64 letters, digits, _ . or - (it becomes part of the principal)")
    return value


def valid_destinations(values: list[str]) -> list[str]:
    """``to``: each a destination (``slack:C0OPS``, ``dingtalk:cid…``), none twice, at least one."""
    if not values:
        raise ValueError("is empty; name at least one destination: slack:<channel id> or dingtalk:<openConversationId>")
    seen = set()
    for value in values:
        dest = str(parse_destination(value))
        if dest in seen:
            raise ValueError(f"{dest} is listed twice; each destination gets one card")
        seen.add(dest)
    return [value.strip() for value in values]


class BasicAuthConfig(Section):
    """HTTP basic auth, as Alertmanager's ``http_config.basic_auth`` sends it."""

    username: str = Field(min_length=1)
    """The user name Alertmanager sends."""
    password: SecretStr
    """The password Alertmanager sends."""

    @field_validator("password")
    @classmethod
    def _not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("is empty; set it with ${ENV_VAR}")
        return value


class AlertRouteConfig(Section):
    """Where the alert groups matching ``match`` go, and whether they are investigated."""

    model_config = ConfigDict(populate_by_name=True)  # ``continue`` is a Python keyword: code says ``continue_``

    name: str = ""
    """The route's name; the principal is ``alerts:<name>``. Empty: ``route-<n>`` by its place (1-based)."""
    match: dict[str, str] = Field(default_factory=dict)
    """Label → value: ``critical`` (equality), ``=~crit.*|warn`` (regex), ``!=…`` or ``!~…``; empty: any group."""
    to: list[str]
    """Destinations: ``slack:<channel id>`` or ``dingtalk:<openConversationId>``; one card per group in each."""
    investigate: bool = False
    """Run a read-only investigation (one tool loop) for each new alert group and show it on the card."""
    role: str = ""
    """The access role the investigation runs as (a role under ``access.roles``); required with ``investigate``."""
    continue_: bool = Field(False, alias="continue")
    """Try the later routes too after this one matched (as Alertmanager's ``continue``)."""

    _name = field_validator("name")(lambda cls, v: valid_name(v) if v else v)

    @field_validator("match")
    @classmethod
    def _matchers(cls, value: dict[str, str]) -> dict[str, str]:
        parse_matchers(value)
        return value

    _to = field_validator("to")(lambda cls, v: valid_destinations(v))

    @model_validator(mode="after")
    def _investigation_has_a_role(self) -> AlertRouteConfig:
        if self.investigate and not self.role:
            raise ValueError(
                "investigate: true needs role: the access role the investigation runs as (a role under access.roles)"
            )
        return self


class AlertsConfig(Section):
    """Alertmanager's webhook (``POST /alerts/alertmanager`` on the gateway's HTTP server) and its routes."""

    token: SecretStr | None = None
    """Bearer token Alertmanager sends (``http_config.authorization.credentials``); empty counts as unset."""
    basic_auth: BasicAuthConfig | None = None
    """Basic auth Alertmanager sends (``http_config.basic_auth``), instead of or besides the token."""
    max_body_bytes: int = Field(2**20, ge=1024, le=64 * 2**20)
    """Largest request body accepted (1 MiB); a larger one gets 413."""
    locale: Literal["en", "zh-CN"] = "en"
    """Language of the alert cards and of the investigation's question."""
    keep_days: float = Field(14.0, gt=0)
    """How long a group's card is remembered after its last notification; a later one starts a new card."""
    routes: list[AlertRouteConfig] = Field(default_factory=list)
    """Routes, tried in order: the first that matches takes the group (later ones too while it says ``continue``)."""
    grafana_url: str = ""
    """A Grafana page linked beside an alert card's graph; ``{expr}`` in it becomes the graphed expression, URL-encoded
    (``https://grafana.example.com/explore?left={"queries":[{"expr":"{expr}"}]}``). Empty: no link."""

    @field_validator("grafana_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("grafana_url must be an http(s) URL, such as https://grafana.example.com/d/abc")
        return value

    @field_validator("token")
    @classmethod
    def _empty_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        # ${ALERTS_TOKEN:-} in a config that does not use alerts yet is no token, not a token of "".
        return value if value is not None and value.get_secret_value() else None

    @field_validator("routes")
    @classmethod
    def _named(cls, routes: list[AlertRouteConfig]) -> list[AlertRouteConfig]:
        return [r if r.name else r.model_copy(update={"name": f"route-{i}"}) for i, r in enumerate(routes, 1)]

    @model_validator(mode="after")
    def _authenticated(self) -> AlertsConfig:
        if self.routes and self.token is None and self.basic_auth is None:
            raise ValueError(
                "set alerts.token (bearer) or alerts.basic_auth (username and password) with ${ENV_VAR}: "
                "routes are configured, and the webhook accepts only authenticated requests"
            )
        return self

    @property
    def enabled(self) -> bool:
        """Whether the webhook is served: some route is configured."""
        return bool(self.routes)
