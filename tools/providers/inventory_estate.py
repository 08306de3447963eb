"""The static estate: databases, caches, load balancers, groups, IPs, DNS, buckets, a cluster and a change log, from the inventory file.

On-prem estates and the offline demo describe what no API can list in the
same YAML file as the hosts (:mod:`tools.providers.inventory`)::

    databases:      [{name, id, engine, ip, dns, port, datacenter, status, security_groups, owner, tags}]
    caches:         (same fields as databases)
    load_balancers: [{name, id, ip, public_ip, dns, scheme, security_groups,
                      listeners: [{protocol, port, backends: [{target, port, health}]}]}]
    security_groups: [{id, name, description, rules: [{direction, protocol, ports, source, action, priority}]}]
    ips:            [{ip, id, attached_to}]
    nat_gateways:   [{id, name, public_ips}]
    dns:            [{name, type, value, ttl, zone}]
    buckets:        [{name, region, public, acl, storage_class}]
    kubernetes:     {context, nodes: [...], pods: [...], workloads: [...], services: [...], ingresses: [...]}
    changes:        [{time, resource, action, principal, source_ip, outcome, detail}]

Every resource it yields has provider ``inventory``; Kubernetes objects carry
the context as their account and the namespace as their region. The file is
re-read when it changes; a broken edit keeps the last good copy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import structlog
import yaml
from pydantic import ValidationError

from botgateway.config import ConfigError, InventoryConfig
from tools.estate.resource import Change, Resource
from tools.estate.source import ChangeQuery, Listing, Prerequisite, SourceError, Target
from tools.providers.inventory import DEFAULT_ACCOUNT, resolve_path
from tools.providers.inventory_sections import SECTION_KINDS, EstateFile

__all__ = ["InventoryEstate", "load_estate"]

log = structlog.get_logger(__name__)

API = "inventory file"


def load_estate(path: Path) -> tuple[str, dict[str, tuple[Resource, ...]], tuple[Change, ...]]:
    """(account, resources by kind, changes) of the file's estate sections; raises :class:`ConfigError` on any problem."""
    where = "tools.inventory.path"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.suffix.lower() != ".csv" else {}
    except (OSError, yaml.YAMLError):
        return DEFAULT_ACCOUNT, {}, ()  # the host loader reports an unreadable file
    if not isinstance(data, dict):
        return DEFAULT_ACCOUNT, {}, ()
    account = str(data.get("name") or DEFAULT_ACCOUNT)
    sections = {k: v for k, v in data.items() if k in SECTION_KINDS or k in ("kubernetes", "changes")}
    try:
        estate = EstateFile.model_validate(sections)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {path.name}: {loc}: {msg}")
        raise ConfigError(problems, source="tools") from None
    return account, estate.resources(account), estate.change_log(account)


class InventoryEstate:
    """The inventory file's estate sections as an estate source."""

    name = "inventory"

    def __init__(self, config: InventoryConfig) -> None:
        self.path = resolve_path(config.path)
        self._mtime = -1.0
        self.account = DEFAULT_ACCOUNT
        self._resources: dict[str, tuple[Resource, ...]] = {}
        self._changes: tuple[Change, ...] = ()
        self._reload()

    def _reload(self) -> None:
        mtime = os.stat(self.path).st_mtime if self.path.exists() else -1.0
        self.account, self._resources, self._changes = load_estate(self.path)
        self._mtime = mtime

    def _fresh(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return
        if mtime != self._mtime:
            try:
                self._reload()
            except ConfigError as exc:
                self._mtime = mtime
                log.warning("inventory_estate_reload_failed", path=str(self.path), problems=exc.problems)

    def kinds(self) -> frozenset[str]:
        """The kinds the file describes."""
        self._fresh()
        return frozenset(kind for kind, found in self._resources.items() if found)

    def targets(self, kind: str = "") -> Sequence[Target]:
        """The file, once."""
        return [Target(self.name, self.account, "")]

    def api_of(self, kind: str) -> str:
        """The file."""
        return API

    async def list(self, target: Target, kind: str) -> Listing:
        """The file's resources of ``kind``."""
        self._fresh()
        return Listing(self._resources.get(kind, ()), False, API)

    async def changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """The change log's entries about the resource, newest first."""
        self._fresh()
        wanted = {v.lower() for v in (query.resource_id, query.resource_name) if v}
        out = []
        for change in self._changes:
            if wanted and change.resource_id.lower() not in wanted and change.resource_name.lower() not in wanted:
                continue
            out.append(change)
        return sorted(out, key=lambda c: c.time, reverse=True)[: query.limit]

    def prerequisites(self) -> Sequence[Prerequisite]:
        """The file must exist."""
        ok = self.path.exists()
        return [Prerequisite(f"inventory file {self.path.name}", ok, "" if ok else f"create {self.path} or set tools.inventory.path")]

    async def probe(self, target: Target) -> None:
        """The file must be readable."""
        if not self.path.exists():
            raise SourceError("not_found", f"inventory file {self.path.name} does not exist")

    async def start(self) -> None:
        """Nothing to start."""

    async def aclose(self) -> None:
        """Nothing to release."""
