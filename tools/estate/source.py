"""What every estate source promises: the places it can be asked, the kinds it lists there, and its changes.

A source is one provider (a cloud with all its accounts and regions, the
Kubernetes contexts, the static inventory). The fan-out
(:mod:`tools.estate.fanout`) decides which :class:`Target` to ask, within the
asker's scopes and a timeout; the source only answers one question about one
target at a time and raises :class:`SourceError` with a short, secret-free
reason when it cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tools.estate.resource import Change, Resource

__all__ = [
    "MAX_PER_LISTING",
    "ChangeQuery",
    "EstateSource",
    "FailureKind",
    "Listing",
    "Prerequisite",
    "SourceError",
    "Target",
]

MAX_PER_LISTING = 2000
"""Most resources of one kind read from one target: pagination stops there, and the listing says it was cut."""

FailureKind = Literal["permission", "credentials", "throttled", "unreachable", "timeout", "not_found", "error"]
"""Why a source could not answer, in the words the answer uses."""


@dataclass(frozen=True)
class Target:
    """One place a source can be asked: an account's region, or a kube context's namespace."""

    provider: str
    """Provider key (``aliyun``, ``tencent``, ``aws``, ``kubernetes``, ``inventory``)."""
    account: str
    """Account label (the kube context's configured name)."""
    region: str = ""
    """Region, or namespace; empty for global services (Route 53, the DNS of a domain) and all namespaces."""


@dataclass(frozen=True)
class Listing:
    """Every resource of one kind one target holds (up to :data:`MAX_PER_LISTING`)."""

    resources: tuple[Resource, ...]
    """What was found, mapped into the one model."""
    cut: bool = False
    """Pagination stopped at the bound: more exist than are listed."""
    api: str = ""
    """The API(s) that answered, as provenance names them (``rds:DescribeDBInstances``)."""


@dataclass(frozen=True)
class ChangeQuery:
    """Which changes to read from a trail."""

    resource_id: str = ""
    """The resource's id, when known (preferred: trails index ids)."""
    resource_name: str = ""
    """Its name (trails also index names)."""
    since: float = 0.0
    """Unix time: changes at or after this."""
    until: float = 0.0
    """Unix time: changes before this (0: now)."""
    limit: int = 50
    """Most changes wanted."""


class SourceError(Exception):
    """A source could not answer; :attr:`reason` is short, secret-free and says how to fix it when it can."""

    def __init__(self, kind: FailureKind, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.kind: FailureKind = kind
        """The class of failure."""
        self.reason = reason
        """What happened, for the model and the card ("permission denied: needs rds:DescribeDBInstances")."""
        self.retry_after_s = retry_after_s
        """For ``throttled``: when the API said to come back, if it did."""


@dataclass(frozen=True)
class Prerequisite:
    """One thing a toolset needs from a source, checked: credentials, an SDK, an API that answers."""

    what: str
    """What was checked ("Alibaba Cloud SDK for RDS", "credentials of account prod", "API of prod/cn-hangzhou")."""
    ok: bool
    """Whether it holds."""
    fix: str = ""
    """When it does not: exactly what to do (a pip command, an environment variable, a RAM policy)."""


class EstateSource(Protocol):
    """One provider's view of the estate."""

    @property
    def name(self) -> str:
        """Provider key (a class constant fits)."""
        ...

    def kinds(self) -> frozenset[str]:
        """The kinds this source can list here (those whose SDK is installed and that are configured)."""
        ...

    def targets(self, kind: str = "") -> Sequence[Target]:
        """Every place ``kind`` can be listed, in config order; ``kind=""``: where the audit trail (events) is read.

        A global kind (DNS zones, bucket lists, cluster nodes) has one target per account with an empty region.
        """
        ...

    def api_of(self, kind: str) -> str:
        """The API a listing of ``kind`` calls, as provenance names it."""
        ...

    async def list(self, target: Target, kind: str) -> Listing:
        """Every resource of ``kind`` at ``target``; raises :class:`SourceError`. Throttling is retried inside."""
        ...

    async def changes(self, target: Target, query: ChangeQuery) -> Sequence[Change]:
        """Recorded changes at ``target`` matching ``query``, newest first; raises :class:`SourceError`."""
        ...

    def prerequisites(self) -> Sequence[Prerequisite]:
        """What this source needs, checked without calling anything remote."""
        ...

    async def probe(self, target: Target) -> None:
        """One cheap read-only call at ``target``; raises :class:`SourceError` when the API does not answer."""
        ...

    async def start(self) -> None:
        """Build clients (import SDKs) outside any request's timeout."""
        ...

    async def aclose(self) -> None:
        """Release clients and threads."""
        ...
