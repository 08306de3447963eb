"""The gateway in this process serving the API and the console, with ``chart_probe`` among its tools.

``botgateway run`` cannot be given a test's tool, so the runtime is built here
as ``run`` builds it (:func:`~botgateway.cli.runtime.build_runtime`), the probe
added to its live registry, its HTTP server and web adapter started. The
scripted model calls ``chart_probe`` for each question, then answers with a lead
line and the figures the tool returned. Two API keys (``ops``, an admin, and
``dash``, a viewer) and the admin password open it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botgateway.cli.runtime import build_runtime
from botgateway.config import parse_config
from botgateway.password_hash import hash_password
from tests.chart_fixtures import chart_maker, chart_probe_tool
from tests.estate_fixtures import tools_then_answer
from tests.web.api_harness import ADMIN_KEY, VIEWER_KEY, api_config
from tools.demo.server import ScriptedLLMServer

__all__ = ["ADMIN_KEY", "LEAD", "PASSWORD", "VIEWER_KEY", "chart_gateway", "chart_model"]

PASSWORD = "console admin password"
"""The console's admin password (``web:admin``)."""
LEAD = "Here is how prod-db-01 is doing:"
"""The first line of every answer."""


def chart_model() -> ScriptedLLMServer:
    """A model that calls ``chart_probe`` for each question, then answers :data:`LEAD` and the tool's figures."""
    return ScriptedLLMServer(responder=tools_then_answer([("call_1", "chart_probe", {})], LEAD))


@asynccontextmanager
async def chart_gateway(tmp_path: Path, llm_url: str, **sections: Any) -> AsyncIterator[str]:
    """The gateway on a free loopback port with ``chart_probe``; yields its URL (``http://127.0.0.1:<port>``)."""
    data = api_config(tmp_path, llm_url, **sections)
    data["http"]["port"] = 0
    data["web"]["admin_password_hash"] = hash_password(PASSWORD)
    data["access"]["roles"]["admin"]["members"].append("web:admin")
    config = parse_config(data, env={})
    async with chart_maker() as maker, build_runtime(config) as runtime:
        assert runtime.http is not None and runtime.web is not None
        runtime.tools.add(chart_probe_tool(maker))
        await runtime.http.start()
        await runtime.web.start(runtime.gateway)
        try:
            yield runtime.http.url
        finally:
            await runtime.web.stop()
