"""The card's provenance: the footer lists the sources the answer used (merged, aged at render time, localized),
a tool line served from an old cache says so, the footer names the model that answered, tokens per adapter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards import render
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.factory import CardFactory
from botgateway.cards.provenance import age_text, cached_note, sources_text
from botgateway.cards.state import CardState
from botgateway.config import AdaptersConfig, CardConfig, SlackConfig
from botgateway.events import (
    ModelAnswering,
    RoundStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnResult,
    Usage,
    UsageReported,
)
from botgateway.sink import CardTarget
from botgateway.snapshot import ToolLine
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import Source

T0 = 1_764_547_200.0
HANGZHOU = Source(provider="aliyun", label="Alibaba Cloud", account="prod", region="cn-hangzhou",
                  api="DescribeInstances", fetched_at=T0)
SHANGHAI = replace(HANGZHOU, region="cn-shanghai", fetched_at=T0 + 5)
INVENTORY = Source(provider="inventory", label="static inventory", api="inventory file", fetched_at=T0 + 20)
CVM = Source(provider="tencent", label="Tencent Cloud", account="default", region="ap-guangzhou",
             api="DescribeInstances (CVM)", fetched_at=T0 + 20)


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def finished(call_id: str, *sources: Source, ok: bool = True, name: str = "search_ecs_by_ip") -> ToolCallFinished:
    return ToolCallFinished(call_id=call_id, name=name, ok=ok, summary="1 instance found" if ok else "timed out",
                            duration_s=0.4, sources=sources)


def line(state: CardState, call_id: str) -> str:
    [block] = [b for b in state.snapshot().blocks if isinstance(b, ToolLine) and b.call_id == call_id]
    return render.tool_line_text(block, state.locale)


# --- the sources line ------------------------------------------------------------------------------


def test_one_entry_per_account_with_its_regions_merged_and_the_oldest_age() -> None:
    text = sources_text([HANGZHOU, INVENTORY, SHANGHAI, HANGZHOU], now=T0 + 40)
    assert text == "sources: Alibaba Cloud prod/cn-hangzhou,cn-shanghai (40 s old) · static inventory"


def test_ages_below_the_threshold_are_not_shown_and_an_unnamed_account_is_left_out() -> None:
    both = sources_text([HANGZHOU, CVM], now=T0 + 29)
    assert both == "sources: Alibaba Cloud prod/cn-hangzhou · Tencent Cloud ap-guangzhou"
    assert sources_text([CVM], now=T0 + 20 + 3 * 3600) == "sources: Tencent Cloud ap-guangzhou (3 h old)"
    assert sources_text([], now=T0) == ""


def test_past_four_entries_the_rest_are_counted() -> None:
    many = [replace(HANGZHOU, account=f"acct{n}") for n in range(6)]
    text = sources_text(many, now=T0)
    assert text.endswith("Alibaba Cloud acct3/cn-hangzhou · +2 more") and "acct4" not in text


def test_the_sources_line_in_chinese() -> None:
    text = sources_text([HANGZHOU, SHANGHAI, INVENTORY, CVM], now=T0 + 12 * 60, locale="zh-CN")
    assert text == "来源：阿里云 prod/cn-hangzhou,cn-shanghai（12 分钟前） · 静态清单（11 分钟前） · 腾讯云 ap-guangzhou（11 分钟前）"
    mcp = Source(provider="mcp:grafana", label="MCP grafana", api="query", fetched_at=T0)
    assert sources_text([mcp], now=T0, locale="zh-CN") == "来源：MCP grafana"  # a name we do not know stays as given


def test_ages_in_their_largest_unit() -> None:
    ages = [age_text(s) for s in (0.4, 59, 60, 3599, 3600, 2 * 86400)]
    assert ages == ["0 s", "59 s", "1 min", "59 min", "1 h", "2 d"]
    assert age_text(125, "zh-CN") == "2 分钟"


def test_only_a_cached_source_older_than_the_limit_makes_a_note() -> None:
    cached = replace(HANGZHOU, cached=True)
    assert cached_note([cached], now=T0 + 12 * 60, stale_after_s=300) == "cached 12 min ago"
    assert cached_note([cached], now=T0 + 299, stale_after_s=300) == ""
    assert cached_note([HANGZHOU], now=T0 + 3600, stale_after_s=300) == ""  # fetched just now by the call
    assert cached_note([cached], now=T0 + 12 * 60, locale="zh-CN", stale_after_s=300) == "缓存于 12 分钟前"


# --- the card --------------------------------------------------------------------------------------


def test_the_footer_lists_the_sources_of_successful_calls_aged_when_rendered() -> None:
    wall = WallClock(T0 + 10)
    state = CardState(model_label="deepseek-chat", wall_clock=wall)
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(ToolCallStarted(call_id="c1", name="search_ecs_by_ip", arguments={"ip": "10.0.1.1"}))
    state.apply(ToolCallStarted(call_id="c2", name="search_cvm_by_ip", arguments={"ip": "10.0.1.1"}))
    state.apply(finished("c1", HANGZHOU, SHANGHAI))
    state.apply(finished("c2", CVM, ok=False, name="search_cvm_by_ip"))  # failed: its sources are not the answer's
    assert state.snapshot().footer.endswith("deepseek-chat — sources: Alibaba Cloud prod/cn-hangzhou,cn-shanghai")
    wall.now = T0 + 40  # the same card drawn later is older
    assert state.snapshot().footer.endswith(" — sources: Alibaba Cloud prod/cn-hangzhou,cn-shanghai (40 s old)")


def test_sources_show_without_the_rest_of_the_footer_and_can_be_turned_off() -> None:
    quiet = CardState(footer=False, wall_clock=WallClock(T0))
    quiet.apply(finished("c1", INVENTORY))
    assert quiet.snapshot().footer == "sources: static inventory"
    off = CardState(sources=False, model_label="m", wall_clock=WallClock(T0))
    off.apply(finished("c1", INVENTORY))
    assert "sources" not in off.snapshot().footer and off.snapshot().footer.endswith("m")
    assert CardState(footer=False, sources=False).snapshot().footer == ""


def test_a_result_from_an_old_cache_says_so_on_its_line() -> None:
    wall = WallClock(T0 + 12 * 60)
    state = CardState(wall_clock=wall, stale_after_s=300)
    state.apply(ToolCallStarted(call_id="c1", name="search_ecs_by_ip", arguments={"ip": "10.0.1.1"}))
    state.apply(ToolCallStarted(call_id="c2", name="search_inventory_by_ip", arguments={"ip": "10.0.1.1"}))
    state.apply(finished("c1", replace(HANGZHOU, cached=True)))
    state.apply(finished("c2", INVENTORY, name="search_inventory_by_ip"))
    assert line(state, "c1") == "✅ search_ecs_by_ip · 0.4 s · 1 instance found · cached 12 min ago"
    assert line(state, "c2") == "✅ search_inventory_by_ip · 0.4 s · 1 instance found"
    assert "Alibaba Cloud prod/cn-hangzhou (12 min old)" in state.snapshot().footer
    wall.now = T0 + 200
    assert "cached" not in line(state, "c1")  # younger than stale_after_s


def test_the_card_in_chinese() -> None:
    state = CardState(locale="zh-CN", model_label="qwen-plus", wall_clock=WallClock(T0 + 12 * 60))
    state.apply(ToolCallStarted(call_id="c1", name="search_ecs_by_ip", arguments={"ip": "10.0.1.1"}))
    state.apply(finished("c1", replace(HANGZHOU, cached=True)))
    assert line(state, "c1").endswith("· 缓存于 12 分钟前")
    assert state.snapshot().footer.endswith("qwen-plus — 来源：阿里云 prod/cn-hangzhou（12 分钟前）")


def test_the_footer_names_the_model_that_answered() -> None:
    state = CardState(model_label="deepseek-chat")
    state.apply(RoundStarted(round=1, max_rounds=8))
    assert state.snapshot().footer.endswith(" · deepseek-chat")
    state.apply(ModelAnswering(model="qwen-plus", endpoint="cheap"))
    assert state.snapshot().footer.endswith(" · qwen-plus")
    state.apply(ModelAnswering(model="gpt-4o-mini", endpoint="backup", fallback_from="primary"))
    assert state.snapshot().footer.endswith(" · answered by gpt-4o-mini (fallback)")
    zh = CardState(locale="zh-CN", model_label="deepseek-chat")
    zh.apply(ModelAnswering(model="qwen-plus", endpoint="backup", fallback_from="primary"))
    assert zh.snapshot().footer.endswith(" · 由 qwen-plus 回答（备用模型）")
    demo = CardState(model_label="demo model", follow_model=False)
    demo.apply(ModelAnswering(model="demo-1", endpoint="primary"))
    assert demo.snapshot().footer.endswith(" · demo model")


def test_tokens_show_only_where_asked() -> None:
    for footer_tokens, shown in ((True, True), (False, False)):
        state = CardState(footer_tokens=footer_tokens)
        state.apply(RoundStarted(round=1, max_rounds=8))
        state.apply(UsageReported(prompt_tokens=1000, completion_tokens=234))
        state.apply(TurnDone(result=TurnResult(answer="ok", usage=Usage(prompt_tokens=1000, completion_tokens=234))))
        assert ("1,234 tokens" in state.snapshot().footer) is shown


class UnusedSink:
    """What building a card reads of its sink (nothing is sent here)."""

    max_chars = 4000


@pytest.mark.parametrize(
    ("card", "adapters", "platform", "tokens"),
    [
        (CardConfig(), AdaptersConfig(), "terminal", True),  # the terminal shows them by default
        (CardConfig(), AdaptersConfig(), "slack", False),
        (CardConfig(footer_tokens=True), AdaptersConfig(), "dingtalk", True),  # the card's default, for null
        (CardConfig(), AdaptersConfig(slack=SlackConfig(footer_tokens=True)), "slack", True),
        (CardConfig(footer_tokens=True), AdaptersConfig(slack=SlackConfig(footer_tokens=False)), "slack", False),
        (CardConfig(footer_tokens=True), None, "terminal", True),
        (CardConfig(), AdaptersConfig(), "web", False),  # no adapter section: the card's default
    ],
)
async def test_the_factory_decides_tokens_per_adapter(
    tmp_path: Path, card: CardConfig, adapters: AdaptersConfig | None, platform: str, tokens: bool
) -> None:
    factory = CardFactory(config=card, budget=RateBudget(), store=SqliteStore(tmp_path / "cards.db"),
                          background=BackgroundTasks(), instance_id="i1", model_label="m", adapters=adapters)
    target = CardTarget(platform=platform, chat_id="C1")
    state, _ = factory.build(UnusedSink(), target, BufferPolicy.from_config())  # type: ignore[arg-type]
    state.apply(RoundStarted(round=1, max_rounds=8))
    state.apply(UsageReported(prompt_tokens=10, completion_tokens=5))
    assert ("15 tokens" in state.snapshot().footer) is tokens
