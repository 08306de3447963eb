"""The demo model: an offline stand-in LLM so a new user sees the whole card with no account.

``llm.provider: demo`` (or ``auto`` without a key) starts the scripted
OpenAI-compatible server in-process with a :class:`~tools.demo.responder.DemoResponder`
deciding each answer. It behaves like a small tool-using model: it streams a
short thought, looks up any IP, instance id or host name in the question with
the inventory tools it is offered (the per-provider IP lookups in parallel when
two or more providers are configured, else ``find_server``), then streams a
Markdown answer composed from the data behind the tool results. Anything else
gets a short note on what it can do. It never pretends to be a real model: the
card footer labels it.

The modules of the demo: :mod:`~tools.demo.question` (what to look up),
:mod:`~tools.demo.planning` (which calls), :mod:`~tools.demo.findings` (what
the calls found), :mod:`~tools.demo.answers` (what to say, in English or
Chinese), :mod:`~tools.demo.summary` (history compression) and
:mod:`~tools.demo.responder` (one reply per request). Questions about the
rest of the estate ("what's behind api.example.com?", "who stopped
prod-db-03?") have their own: :mod:`~tools.demo.estate_questions`,
:mod:`~tools.demo.estate_planning`, :mod:`~tools.demo.estate_findings`,
:mod:`~tools.demo.estate_answers` (with :mod:`~tools.demo.estate_trace_answer`
and :mod:`~tools.demo.estate_words`). "How is prod-db-01 doing?" is read by
:mod:`~tools.demo.metric_questions` and answered with the figures by
:mod:`~tools.demo.metric_answers`; the sample estate's numbers come from
:mod:`~tools.demo.recorded_metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack

import structlog

from botgateway.tooling import RecentOutcomes
from tools.demo.responder import DemoResponder
from tools.demo.server import ScriptedLLMServer
from tools.providers.base import Provider
from tools.providers.inventory import InventoryProvider

__all__ = ["start_demo_model"]

log = structlog.get_logger(__name__)


async def start_demo_model(
    stack: AsyncExitStack,
    *,
    outcomes: RecentOutcomes | None = None,
    providers: Sequence[Provider] = (),
) -> str:
    """Start the demo model server in-process; returns its base URL. Stopped when ``stack`` closes.

    ``outcomes`` is the registry that runs the model's tool calls (the demo
    reads the data behind their results there); the static inventory among
    ``providers`` tells it which host names to recognise.
    """
    inventory = next((p for p in providers if isinstance(p, InventoryProvider)), None)
    responder = DemoResponder(outcomes=outcomes, hosts=inventory)
    server = ScriptedLLMServer(responder=responder, model="botgateway-demo")
    base_url = await server.start()
    stack.push_async_callback(server.stop)
    log.info("demo.started", base_url=base_url, known_hosts=len(inventory.host_names()) if inventory is not None else 0)
    return base_url
