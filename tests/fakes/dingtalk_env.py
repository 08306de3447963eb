"""The DingTalk side of the adapter tests: the fake DingTalk, the scripted model, a real gateway and the adapter.

:class:`EnvFactory` starts everything on loopback (SQLite in ``tmp_path``) and
yields an :class:`Env` whose ``ask`` pushes a bot message through the fake
Stream-mode gateway and checks the client acked it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from adapters.dingtalk import DingTalkAdapter
from botgateway.approvals import ApprovalDesk
from botgateway.budget import RateBudget
from botgateway.cards.caller import BudgetPacer
from botgateway.config import AccessConfig, Config, parse_config
from botgateway.gateway import Gateway
from botgateway.history import Memory
from botgateway.loop import ToolLoop
from botgateway.model import LLMClient
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import ToolRegistry, tool
from tests.fakes.dingtalk import FakeCard, FakeDingTalk, bot_message
from tests.fakes.restart import restart_tool
from tools.demo.server import ScriptedLLMServer

__all__ = ["GROUP", "Env", "EnvFactory", "dingtalk_config", "find_host"]

GROUP = "cidOpsGroup01=="
"""The group chat most tests talk in."""


@tool
def find_host(ip: str) -> str:
    """Find a host by IP.

    Args:
        ip: The IP address.
    """
    return f"1 host: web-01 {ip} running"


@dataclass
class Env:
    fake: FakeDingTalk
    llm_server: ScriptedLLMServer
    store: SqliteStore
    gateway: Gateway
    adapter: DingTalkAdapter
    config: Config
    restarts: list[str] = field(default_factory=list)
    """Hosts the approval tests' ``restart_server`` restarted."""

    async def ask(self, text: str, **kwargs: Any) -> tuple[str, str]:
        """Push a bot message; returns (msgId, frame id) once the client acked it."""
        kwargs.setdefault("conversation_id", GROUP)
        kwargs.setdefault("webhook", self.fake.session_webhook(kwargs["conversation_id"]))
        data = bot_message(text, **kwargs)
        frame = await self.fake.push_bot_message(data)
        ack = await self.fake.wait_ack(frame)
        assert ack["code"] == 200 and ack["headers"]["messageId"] == frame
        return data["msgId"], frame

    async def finished(self, msg_id: str, timeout: float = 15.0):
        """Wait for the turn of ``msg_id`` to end and return its outcome."""
        await self.adapter.drain()
        submission = self.adapter.submission(msg_id)
        assert submission is not None and submission.done is not None, f"{msg_id} was not submitted"
        return await asyncio.wait_for(submission.done, timeout)

    def cards(self, conversation: str = GROUP) -> list[FakeCard]:
        return self.fake.cards_in(f"dtv1.card//IM_GROUP.{conversation}")


def dingtalk_config(fake: FakeDingTalk, llm_url: str, **dingtalk: Any) -> Config:
    section = {
        "enabled": True,
        "client_id": fake.client_id,
        "client_secret": fake.client_secret,
        "card_template_id": "botgateway-ai-card.schema",
        "api_base_url": fake.base_url,
        "oapi_base_url": fake.base_url,
        "locale": "zh-CN",
        **dingtalk,
    }
    return parse_config(
        {
            "llm": {"provider": "custom", "base_url": llm_url, "model": "m", "max_rounds": 4},
            "card": {"final_deadline_s": 10, "footer": False},
            "adapters": {"dingtalk": section},
        },
        env={},
    )


class EnvFactory:
    """Builds environments; everything it started is closed in reverse order after the test."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.closers: list[Any] = []

    async def fake(self, **options: Any) -> FakeDingTalk:
        fake = FakeDingTalk(**options)
        await fake.start()
        self.closers.append(fake.stop)
        return fake

    async def __call__(
        self, *, fake: FakeDingTalk | None = None, db: str = "dt.db", responder: Any = None,
        access_config: dict[str, Any] | None = None, approvals: bool = False, tools: list[Any] | None = None,
        **dingtalk: Any
    ) -> Env:
        """``approvals``: calls can wait for an approver; ``restart_server`` (recording into ``Env.restarts``) is offered.
        ``tools``: what the model is offered (default: ``find_host``)."""
        closers = self.closers
        tmp_path = self.tmp_path
        if fake is None:
            fake = await self.fake()
        llm_server = ScriptedLLMServer(responder=responder)
        llm_url = await llm_server.start()
        closers.append(llm_server.stop)
        config = dingtalk_config(fake, llm_url, **dingtalk)
        if access_config is not None:  # the ``access:`` section
            config = config.model_copy(update={"access": AccessConfig.model_validate(access_config)})
        store = SqliteStore(tmp_path / db)
        await store.open()
        closers.append(store.close)
        llm = LLMClient(config.llm, base_url=llm_url)
        closers.append(llm.aclose)
        memory = Memory(store, max_history_tokens=6000, keep_recent_turns=2)
        closers.append(memory.aclose)  # closed before the store: history written behind the turns lands first
        restarts: list[str] = []
        desk = ApprovalDesk() if approvals else None
        tools = [*(tools if tools is not None else [find_host]), *([restart_tool(restarts)] if approvals else [])]
        loop = ToolLoop(llm, ToolRegistry(tools), memory, max_rounds=4, system_prompt="sys", approvals=desk,
                        approval_timeout_s=config.access.approvals.timeout_s if config.access else 300.0)
        budget = RateBudget()
        gateway = Gateway(loop=loop, store=store, budget=budget, config=config, approvals=desk)
        closers.append(gateway.aclose)
        # the sink's own calls (a chart's upload and image message) paid from the gateway's budget, as Slack's are
        adapter = DingTalkAdapter(config.adapters.dingtalk, gateway=gateway, pacer=BudgetPacer(budget))
        await adapter.start()
        closers.append(adapter.stop)
        if config.adapters.dingtalk.mode == "stream":
            await fake.wait_connected()
        return Env(fake, llm_server, store, gateway, adapter, config, restarts)
