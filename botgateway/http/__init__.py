"""The gateway's HTTP server: probes, metrics, and the seam later front doors mount on.

:mod:`.server` is the aiohttp application and its listening socket;
:mod:`.probes` answers ``/healthz`` and ``/readyz``; :mod:`.metrics` serves
``/metrics``. The composition root (:mod:`botgateway.cli`) builds the server,
mounts what the config enables, and starts it before the adapters.
"""

from __future__ import annotations

from botgateway.http.metrics import metrics_routes
from botgateway.http.probes import READY_TIMEOUT_S, Connectable, Pingable, Readiness, ReadinessReport, probe_routes
from botgateway.http.server import MAX_BODY_BYTES, HttpServer

__all__ = [
    "MAX_BODY_BYTES",
    "READY_TIMEOUT_S",
    "Connectable",
    "HttpServer",
    "Pingable",
    "Readiness",
    "ReadinessReport",
    "metrics_routes",
    "probe_routes",
]
