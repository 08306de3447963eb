"""``/healthz`` and ``/readyz``: whether the process is alive, and whether it should be sent work.

``/healthz`` answers 200 whenever the event loop does: a process whose loop
is stuck gets no answer and is restarted by its orchestrator. ``/readyz``
answers 200 only when every check passes: start-up finished, the process is not
draining (SIGTERM turns it false at once), the store answers a cheap ping
within a short timeout, and every adapter is connected to its platform.
Otherwise 503, and the JSON body says which check failed and why, in words
that hold no secret (the store's own error text, which may name hosts, goes
to the log, once per change).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from aiohttp import web

__all__ = ["READY_TIMEOUT_S", "Connectable", "Pingable", "Readiness", "ReadinessReport", "probe_routes"]

log = structlog.get_logger(__name__)

READY_TIMEOUT_S = 2.0
"""Longest wait for the store's ping: probes come every few seconds, and a store slower than this is not serving."""

_OK = "ok"
"""A check that passed."""


class Pingable(Protocol):
    """A store, as readiness sees it."""

    async def ping(self) -> None:
        """One cheap round trip; raises when the store does not answer."""
        ...


class Connectable(Protocol):
    """An adapter, as readiness sees it."""

    name: str
    """The adapter's name (``slack``), the check's name."""

    @property
    def connected(self) -> bool:
        """Whether it can take questions now (its socket is open, or its HTTP listener is up)."""
        ...


@dataclass(frozen=True)
class ReadinessReport:
    """The outcome of one readiness check."""

    checks: Mapping[str, str]
    """Each check's name → ``"ok"`` or why it failed."""

    @property
    def ready(self) -> bool:
        """True when every check passed."""
        return all(result == _OK for result in self.checks.values())

    @property
    def failed(self) -> list[str]:
        """The names of the checks that failed."""
        return [name for name, result in self.checks.items() if result != _OK]

    def as_json(self) -> dict[str, Any]:
        """The probe's JSON body."""
        return {"ready": self.ready, "failed": self.failed, "checks": dict(self.checks)}


class Readiness:
    """The state ``/readyz`` reports: started, draining, the store and the adapters (mutable; owned by ``run``)."""

    def __init__(self, store: Pingable, *, timeout_s: float = READY_TIMEOUT_S) -> None:
        self._store = store
        self._timeout_s = timeout_s
        self._adapters: list[Connectable] = []
        self._started = False
        self._draining = False
        self._last_failed: list[str] = []
        self._store_detail = ""

    @property
    def draining(self) -> bool:
        """True once :meth:`start_draining` was called."""
        return self._draining

    def watch(self, adapter: Connectable) -> None:
        """Count ``adapter`` in: the process is ready only while it is connected."""
        self._adapters.append(adapter)

    def mark_started(self) -> None:
        """Start-up is over (the adapters are started and watched)."""
        self._started = True

    def start_draining(self) -> None:
        """The process is shutting down: never ready again."""
        self._draining = True

    async def report(self) -> ReadinessReport:
        """Run every check now."""
        checks = {
            "started": _OK if self._started else "still starting",
            "draining": "shutting down: finishing the answers in progress" if self._draining else _OK,
            "store": await self._ping(),
        }
        for adapter in self._adapters:
            checks[adapter.name] = _OK if adapter.connected else "not connected to the platform"
        report = ReadinessReport(checks)
        if report.failed != self._last_failed:
            self._last_failed = report.failed
            # Once per change, not per probe; the store's own words only here (the log masks secrets).
            log.info("http.readiness", ready=report.ready, failed=report.failed,
                     store_error=self._store_detail if checks["store"] != _OK else None)
        return report

    async def _ping(self) -> str:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._store.ping()
        except TimeoutError:
            return f"no answer within {self._timeout_s:g} s"
        except Exception as exc:
            # The message may name hosts and ports: the log has it, the probe only the kind.
            self._store_detail = str(exc)[:300] or type(exc).__name__
            return f"not answering ({type(exc).__name__})"
        return _OK


def probe_routes(readiness: Readiness) -> list[web.RouteDef]:
    """``GET /healthz`` and ``GET /readyz`` over ``readiness``."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def readyz(request: web.Request) -> web.Response:
        report = await readiness.report()
        return web.json_response(report.as_json(), status=200 if report.ready else 503)

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
