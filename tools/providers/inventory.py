"""The static inventory: on-prem hosts listed in a YAML or CSV file.

YAML::

    name: on-prem                 # account label (optional)
    hosts:
      - name: prod-db-01
        ip: 10.0.1.100            # or ips: [10.0.1.100, 10.0.9.100]
        env: prod
        datacenter: idc-shanghai  # shown as the region
        rack: A03                 # shown as the zone
        os: Rocky Linux 9.3
        cpu: 32
        memory_gb: 128
        status: running
        owner: dba-team
        tags: {role: mysql-primary}

CSV has the same columns; list values (``ips``, ``public_ips``) are separated
by ``;`` or spaces and ``tags`` is ``key=value;key=value``. The file is re-read
when it changes, so operators can edit it without a restart.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from botgateway.config import ConfigError, InventoryConfig
from botgateway.grant import Scope
from botgateway.tooling import Source
from tools.providers.base import ServerQuery
from tools.providers.scope import shows, view_of
from tools.server_record import STATUSES, SearchResult, Server

__all__ = ["DEFAULT_ACCOUNT", "LABEL", "InventoryEntry", "InventoryHost", "InventoryProvider", "load_inventory", "resolve_path"]

log = structlog.get_logger(__name__)

DEFAULT_ACCOUNT = "on-prem"
"""Account label of an inventory file that does not name itself."""

LABEL = "static inventory"
"""How provenance names the inventory ("Alibaba Cloud prod/cn-hangzhou · static inventory")."""

API = "inventory file"
"""What provenance says was read."""


class InventoryEntry(BaseModel):
    """An entry of the inventory file: unknown fields are errors, tag, label and selector values are strings."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("tags", "labels", "selector", mode="before", check_fields=False)
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        return value


class InventoryHost(InventoryEntry):
    """One host line of the inventory file."""

    name: str = Field(min_length=1)
    id: str = ""
    ip: str = ""
    ips: list[str] = Field(default_factory=list)
    public_ips: list[str] = Field(default_factory=list)
    env: str = ""
    datacenter: str = ""
    rack: str = ""
    model: str = ""
    os: str = ""
    cpu: int | None = Field(None, ge=0)
    memory_gb: float | None = Field(None, ge=0)
    status: str = "running"
    owner: str = ""
    vlan: str = ""
    security_groups: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    created_at: str = ""
    expires_at: str = ""

    @field_validator("ip")
    @classmethod
    def _one_ip(cls, value: str) -> str:
        return str(ipaddress.ip_address(value.strip())) if value.strip() else ""

    @field_validator("ips", "public_ips")
    @classmethod
    def _ip_list(cls, values: list[str]) -> list[str]:
        return [str(ipaddress.ip_address(v.strip())) for v in values if v.strip()]

    @field_validator("status")
    @classmethod
    def _status(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in STATUSES:
            raise ValueError(f"unknown status {value!r}; use one of {', '.join(STATUSES)}")
        return value

    def to_server(self, account: str) -> Server:
        """The normalized record; env and owner become tags."""
        tags = dict(self.tags)
        if self.env:
            tags.setdefault("env", self.env)
        if self.owner:
            tags.setdefault("owner", self.owner)
        private = ([self.ip] if self.ip else []) + [i for i in self.ips if i != self.ip]
        return Server(
            provider="inventory",
            account=account,
            region=self.datacenter or "on-prem",
            zone=self.rack,
            instance_id=self.id or self.name,
            name=self.name,
            status=self.status,
            instance_type=self.model,
            cpu=self.cpu,
            memory_gb=self.memory_gb,
            os=self.os,
            private_ips=tuple(private),
            public_ips=tuple(self.public_ips),
            vpc=self.vlan,
            security_groups=tuple(self.security_groups),
            tags=tags,
            created_at=self.created_at,
            expires_at=self.expires_at,
        )


def resolve_path(path: str) -> Path:
    """``path`` as given, or (for the shipped default) next to this package."""
    candidate = Path(path).expanduser()
    if candidate.exists() or candidate.is_absolute():
        return candidate
    packaged = Path(__file__).resolve().parent.parent / Path(path).name
    if Path(path).parts[:1] == ("tools",) and packaged.exists():
        return packaged
    return candidate


def load_inventory(path: Path) -> tuple[str, list[Server]]:
    """Read and validate the file; raises :class:`ConfigError` listing every bad host."""
    where = "tools.inventory.path"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{where}: inventory file {str(path)!r} does not exist"], source="tools") from None
    except OSError as exc:
        raise ConfigError([f"{where}: cannot read {str(path)!r}: {exc.strerror}"], source="tools") from None
    account = DEFAULT_ACCOUNT
    if path.suffix.lower() == ".csv":
        rows: list[Any] = [_csv_row(row) for row in csv.DictReader(io.StringIO(text))]
    else:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark else ""
            raise ConfigError([f"{where}: {path} is not valid YAML{at}"], source="tools") from None
        if isinstance(data, list):
            rows = data
        elif isinstance(data, dict) and isinstance(data.get("hosts"), list):
            rows = data["hosts"]
            account = str(data.get("name") or DEFAULT_ACCOUNT)
        else:
            raise ConfigError([f"{where}: {path} must hold a 'hosts:' list"], source="tools")
    problems: list[str] = []
    servers: list[Server] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        label = f"{path.name} host #{i + 1}" + (f" ({row.get('name')})" if isinstance(row, dict) and row.get("name") else "")
        if not isinstance(row, dict):
            problems.append(f"{label}: expected a mapping of fields")
            continue
        try:
            host = InventoryHost.model_validate(row)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "host"
                msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
                problems.append(f"{label}: {loc}: {msg}")
            continue
        server = host.to_server(account)
        if server.instance_id in seen:
            problems.append(f"{label}: duplicate host {server.instance_id!r}")
            continue
        seen.add(server.instance_id)
        servers.append(server)
    if problems:
        raise ConfigError(problems, source="tools")
    return account, servers


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key is None or value is None or str(value).strip() == "":
            continue
        key = key.strip()
        value = str(value).strip()
        if key in ("ips", "public_ips"):
            out[key] = value.replace(";", " ").replace(",", " ").split()
        elif key == "tags":
            pairs = [p.partition("=") for p in value.split(";") if p.strip()]
            out[key] = {k.strip(): v.strip() for k, _, v in pairs}
        else:
            out[key] = value
    return out


class InventoryProvider:
    """Answers from the inventory file; re-reads it when its modification time changes."""

    name = "inventory"

    def __init__(self, config: InventoryConfig) -> None:
        self.path = resolve_path(config.path)
        self._mtime = -1.0
        self.account = DEFAULT_ACCOUNT
        self._servers: list[Server] = []
        self._reload()

    @property
    def servers(self) -> list[Server]:
        """Every host, reloading the file first if it changed (a broken edit keeps the last good copy)."""
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as exc:
            if self._mtime != -2.0:
                log.warning("inventory_unreadable", path=str(self.path), error=exc.strerror)
                self._mtime = -2.0
            return self._servers
        if mtime != self._mtime:
            try:
                self._reload()
            except ConfigError as exc:
                self._mtime = mtime  # report a broken edit once, not on every lookup
                log.warning("inventory_reload_failed", path=str(self.path), problems=exc.problems)
        return self._servers

    def _reload(self) -> None:
        mtime = os.stat(self.path).st_mtime if self.path.exists() else -1.0
        self.account, self._servers = load_inventory(self.path)
        self._mtime = mtime
        log.info("inventory_loaded", path=str(self.path), hosts=len(self._servers))

    def host_names(self) -> list[str]:
        """The name of every host, in file order (re-read first if the file changed)."""
        return [server.name for server in self.servers]

    def owns_id(self, instance_id: str) -> bool:
        """Inventory ids are host names or free-form; any id may be one."""
        return any(s.instance_id == instance_id for s in self.servers)

    async def search(self, query: ServerQuery, scopes: Sequence[Scope] = (), *, fresh: bool = False) -> SearchResult:
        """Match hosts in memory; with ``scopes``, only hosts whose account, data centre and tags they allow.

        ``fresh`` changes nothing: the file is read again whenever it changed.
        """
        if scopes and not any(scope.provider in ("", self.name) for scope in scopes):
            return SearchResult(query.describe(), scoped=True)  # the inventory is not the asker's to search
        found: list[Server] = []
        for server in self.servers:
            if scopes and not shows(view_of(scopes, self.name, server.account, server.region), server.tags):
                continue
            if query.kind == "ip":
                if query.value not in server.ips:
                    continue
            elif query.kind == "id":
                if server.instance_id.lower() != query.value.lower():
                    continue
            if query.accepts(server):
                found.append(server)
        return SearchResult.merge(
            query.describe(),
            [
                SearchResult(
                    query.describe(), tuple(found), searched=(self.name,), answered=(self.name,), scoped=bool(scopes),
                    sources=(self.source(),),
                )
            ],
            limit=query.limit,
        )

    def source(self) -> Source:
        """The provenance of an answer given now: the file, named when it names itself."""
        account = self.account if self.account != DEFAULT_ACCOUNT else ""
        return Source(provider=self.name, label=LABEL, account=account, api=API, fetched_at=time.time())

    async def aclose(self) -> None:
        """Nothing to release."""
