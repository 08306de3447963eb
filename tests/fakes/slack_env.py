"""The Slack side of the adapter tests: the fake Slack, the scripted model, a real gateway and the adapter.

``_env`` starts everything on loopback (SQLite in ``tmp_path``) and yields an
:class:`Env` whose ``push`` sends a Socket Mode envelope, checks its ack
arrives within Slack's 3 s, and returns what the adapter did with it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from adapters.slack import SlackAdapter
from adapters.slack.adapter import Delivery
from botgateway.approvals import ApprovalDesk
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import AccessConfig, Config, parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.messages import TurnOutcome
from botgateway.model import LLMClient
from botgateway.sink import FleetLines
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolError, ToolRegistry, tool
from tests.fakes.restart import restart_tool
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack, Message
from tools.demo.server import ScriptedLLMServer

CURSOR = "▌"


@tool
def find_server(query: str) -> str:
    """Find a server by IP or name.

    Args:
        query: IP or name.
    """
    return f"1 match for {query}: web-1 (running)"


@tool
def inventory_lookup(region: str) -> str:
    """Look up hosts in a region.

    Args:
        region: Region name.
    """
    raise ToolError(f"the inventory service for {region} is not reachable")


@dataclass
class Env:
    """Everything one adapter test talks to."""

    fake: FakeSlack
    llm: ScriptedLLMServer
    budget: RateBudget
    store: SqliteStore
    gateway: Gateway
    adapter: SlackAdapter
    config: Config
    deliveries: asyncio.Queue[Delivery]
    restarts: list[str] = field(default_factory=list)
    """Hosts the approval tests' ``restart_server`` restarted."""

    async def push(self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0) -> Delivery:
        """Push an Events API envelope, check it is acked within 3 s, and return what the adapter did."""
        payload = self.fake.event_payload(event, event_id=event_id)
        envelope_id = await self.fake.push(payload, retry_attempt=retry_attempt,
                                           retry_reason="timeout" if retry_attempt else "")
        ack = await self.fake.wait_ack(envelope_id, timeout=3.0)
        assert ack["envelope_id"] == envelope_id
        return await self.next_delivery()

    async def next_delivery(self) -> Delivery:
        """The adapter's next :class:`Delivery` (fails after 10 s instead of hanging)."""
        return await asyncio.wait_for(self.deliveries.get(), 10)

    async def done(self, delivery: Delivery) -> TurnOutcome:
        """Wait for the submitted turn's card to be final and return the outcome."""
        assert delivery.outcome == "submitted", delivery
        assert delivery.submission is not None and delivery.submission.done is not None
        return await asyncio.wait_for(delivery.submission.done, 20)

    async def answer_all(self, events: Iterable[dict[str, Any]]) -> list[TurnOutcome]:
        """Push several events back to back (each acked within 3 s) and wait for every turn's final card."""
        envelopes = [await self.fake.push(self.fake.event_payload(e)) for e in events]
        for envelope in envelopes:
            await self.fake.wait_ack(envelope, timeout=3.0)
        deliveries = [await self.next_delivery() for _ in envelopes]
        return list(await asyncio.gather(*(self.done(d) for d in deliveries)))


def slack_config(llm_url: str, fake: FakeSlack, **slack: Any) -> Config:
    """A config pointing the model at ``llm_url`` and Slack at ``fake``; ``slack`` overrides adapter keys."""
    policy = {"answer": {"min_chars": 1, "min_interval_s": 0.05, "max_wait_s": 0.2}}
    return parse_config(
        {
            "llm": {"provider": "custom", "base_url": llm_url, "model": "m", "max_rounds": 4, "max_retries": 0},
            "gateway": {"admins": ["UADMIN"]},
            "card": {"final_deadline_s": 15, "footer": False, "show_thought": False},
            "adapters": {
                "slack": {
                    "enabled": True,
                    "bot_token": BOT_TOKEN,
                    "app_token": APP_TOKEN,
                    "signing_secret": SIGNING_SECRET,
                    "api_base_url": fake.api_url,
                    "http_host": "127.0.0.1",
                    "streaming": "edit",
                    "policy": policy,
                    **slack,
                }
            },
        },
        env={},
    )


async def slack_env(
    tmp_path: Any,
    *,
    fake: FakeSlack | None = None,
    http_port: int | None = None,
    responder: Any = None,
    access: Any = None,
    access_config: dict[str, Any] | None = None,
    approvals: bool = False,
    tools: list[Any] | None = None,
    lines: FleetLines | None = None,
    store: SqliteStore | None = None,
    **slack: Any,
) -> AsyncIterator[Env]:
    """Start the fake Slack, the scripted model, a gateway and the adapter; tear down in ``botgateway run``'s order.

    ``tools``: what the model is offered (default: ``find_server`` and ``inventory_lookup``); ``lines``: the fleet's
    channel lines, as a replica of a fleet has them (None: one process); ``store``: the gateway's store, not yet
    open (default: a SQLite file in ``tmp_path``).
    """
    fake = fake or FakeSlack()
    await fake.start()
    llm_server = ScriptedLLMServer(responder=responder)
    llm_url = await llm_server.start()
    config = slack_config(llm_url, fake, **slack)
    if access_config is not None:  # the ``access:`` section (``access`` is the gateway's hook)
        config = config.model_copy(update={"access": AccessConfig.model_validate(access_config)})
    store = store or SqliteStore(tmp_path / "slack.db")
    await store.open()
    memory = Memory(store, max_history_tokens=6000, keep_recent_turns=4)
    llm = LLMClient(config.llm, base_url=llm_url)
    # ``approvals``: calls can wait for an approver (restart_server is offered to be one of them).
    desk = ApprovalDesk() if approvals else None
    restarts: list[str] = []
    tools = [*(tools if tools is not None else [find_server, inventory_lookup]),
             *([restart_tool(restarts)] if approvals else [])]
    loop = ToolLoop(llm, ToolRegistry(tools), memory, max_rounds=4, system_prompt="sys", approvals=desk,
                    approval_timeout_s=config.access.approvals.timeout_s if config.access else 300.0)
    extra: dict[str, Any] = {"access": access} if access is not None else {}
    if desk is not None:
        extra["approvals"] = desk
    budget = RateBudget()  # one per process, as in ``botgateway run``: cards and Stop controls share it
    gateway = Gateway(loop=loop, store=store, budget=budget, config=config, model_label="test", **extra)
    deliveries: asyncio.Queue[Delivery] = asyncio.Queue()
    adapter = SlackAdapter(config.adapters.slack, store=store, http_port=http_port, observer=deliveries.put_nowait,
                           pacer=BudgetPacer(budget), lines=lines)
    await adapter.start(gateway)
    try:
        yield Env(fake, llm_server, budget, store, gateway, adapter, config, deliveries, restarts)
    finally:
        await gateway.aclose()  # cards are finished while the adapter can still reach Slack
        await adapter.stop()
        await llm.aclose()
        await memory.aclose()  # history written behind the turns lands before the store closes
        await store.close()
        await llm_server.stop()
        await fake.stop()


def answer_of(markdown: str) -> str:
    """The answer part of an edit-mode card: asker line and cursor removed."""
    text = re.sub(r"^@\S+\n\n", "", markdown)
    return text.replace("\n" + CURSOR, "").replace(CURSOR, "")


def controls(env: Env, channel: str, thread_ts: str) -> list[Message]:
    """Stop controls of native streams in a thread: plain bot messages with a Stop button."""
    return [m for m in replies(env, channel, thread_ts) if not m.stream and m.buttons()]


def replies(env: Env, channel: str, thread_ts: str | None) -> list[Message]:
    """The bot's messages in ``channel`` under ``thread_ts`` (None: top level), oldest first."""
    return [m for m in env.fake.channel_messages(channel) if m.thread_ts == thread_ts]


ANSWER = ("10.0.1.100 is web-1, a running Ubuntu host in dc1. It serves the storefront and has been up "
          "for 41 days; its last deploy was on Monday and nothing looks wrong with it right now.")


