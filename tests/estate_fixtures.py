"""Shared setup of the estate's end-to-end tests: the real toolset on the sample estate or cloud fakes, a model script.

The tools are built as ``botgateway run`` builds them (:func:`tools.catalog.build_toolset`
from a :class:`ToolsConfig`), on the static sample estate or on loopback fakes
of the clouds and of a Kubernetes API server reached through the real SDKs.
The scripted model calls the tools it is given, then answers with a lead line
followed by every tool result it received, word for word, so what a tool
returned is what the card shows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from botgateway.config import CloudAccount, CloudProviderConfig, InventoryConfig, ToolsConfig
from botgateway.stores.base import AuditRecord, AuditStore
from botgateway.tooling import tool_result_body
from tests.fakes.clouds import FakeCloud
from tests.paths import SAMPLE_INVENTORY
from tools.catalog import Toolset, build_toolset
from tools.demo.script import Responder, Script, ToolCallSpec
from tools.demo.server import ScriptedLLMServer

__all__ = [
    "ESTATE_TOOLSETS",
    "TRACE_CHAIN",
    "audit_of",
    "cloud_account",
    "cloud_section",
    "estate_toolset",
    "sample_estate_config",
    "tool_results",
    "tools_then_answer",
]

ESTATE_TOOLSETS = ["network", "data", "dns", "storage", "kubernetes", "changes"]
"""Every toolset but ``servers``: the cloud fakes of the estate do not serve the server APIs (ECS, CVM)."""


TRACE_CHAIN = (
    "api.example.com CNAME api-lb.lb.example.net",  # DNS
    "load balancer api-lb [lb-api-01]",  # → the load balancer
    "→ listener: https:443",  # → its listener
    "→ backend :8443 healthy: server prod-web-01",  # → a backend
    "→ security group: security group web-servers [sg-web]",  # → its security group
    "→ backend :8443 unhealthy: server prod-web-02",  # → the other backend, whose group was shown above
)
"""The chain of ``trace api.example.com`` on the sample estate, in the order it must read."""

def sample_estate_config(**sections: Any) -> ToolsConfig:
    """Every toolset on the sample inventory (``tools/sample_inventory.yaml``); ``sections`` override keys."""
    values: dict[str, Any] = {"inventory": InventoryConfig(path=str(SAMPLE_INVENTORY))}
    values.update(sections)
    return ToolsConfig(**values)


def cloud_account(name: str, fake: FakeCloud, key_id: str, secret: str, region: str) -> CloudAccount:
    """One account whose every product is ``fake`` (the endpoint override), signed with ``key_id``/``secret``."""
    return CloudAccount(name=name, access_key_id=key_id, access_key_secret=secret, regions=[region],
                        endpoint=fake.endpoint)


def cloud_section(*accounts: CloudAccount) -> CloudProviderConfig:
    """An enabled cloud provider over ``accounts``, with a quick timeout (the fakes answer at once)."""
    return CloudProviderConfig(enabled=True, accounts=list(accounts), timeout_s=5.0)


@asynccontextmanager
async def estate_toolset(config: ToolsConfig) -> AsyncIterator[Toolset]:
    """The toolset ``config`` asks for, its sources started, closed on exit."""
    toolset = await build_toolset(config)
    try:
        yield toolset
    finally:
        await toolset.aclose()


def tools_then_answer(calls: Sequence[ToolCallSpec], lead: str) -> Responder:
    """A model that makes ``calls`` for each question, then answers ``lead`` and every tool result it got, verbatim."""

    def respond(body: dict[str, Any]) -> Script:
        results = _results_since_question(body["messages"])
        if not results:
            return Script.tool_calls(list(calls))
        return Script.text("\n\n".join([lead, *results]), chunk_size=64)

    return respond


def _results_since_question(messages: Sequence[dict[str, Any]]) -> list[str]:
    asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    return [tool_result_body(str(m["content"])) for m in messages[asked:] if m.get("role") == "tool"]


def tool_results(llm: ScriptedLLMServer) -> dict[str, str]:
    """The tool results of the last request the model got, by call id (the bodies, without their wrapper)."""
    return {m["tool_call_id"]: tool_result_body(str(m["content"]))
            for m in llm.requests[-1]["messages"] if m.get("role") == "tool"}


async def audit_of(store: AuditStore, turn_id: str) -> AuditRecord:
    """The audit record of ``turn_id`` (written before the turn's outcome resolves)."""
    [record] = [r for r in await store.audit_records() if r.turn_id == turn_id]
    return record
