"""Limits learned from the platform: a throttle pauses its key for every caller and lowers the rate its calls are
granted by; quiet gives it back step by step; the console and ``/metrics`` show what was configured and learned.

The in-memory budget runs on a virtual clock (:mod:`tests.virtual_time`): the budget's own clock is the loop's, so
its waits cost no real time and every grant time is exact. The fleet's variant (real Redis, a key prefix of its own)
runs on a clock the test moves: the scripts take the callers' time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from adapters.web.console_status import StatusParts, console_status
from botgateway.budget import Learning, LocalLedger, RateBudget, RateLimit, RedisLedger, SharedLedger
from botgateway.budget.learned import Learned
from botgateway.budget.rate_budget import SHOWN_KEYS
from botgateway.cards.caller import CallOutcome, CardCaller
from botgateway.cli.runtime import build_runtime
from botgateway.config import parse_config
from botgateway.sink import RateLimited
from botgateway.stores.sqlite import SqliteStore
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix
from tests.virtual_time import in_virtual_time
from tests.watched_ledger import CountsRefusals

KEY = "dingtalk:app-1:card"
BUCKET = RateLimit(rate_per_s=10.0, burst=10)
"""A token bucket: ten calls a second, ten at once."""
WINDOW = RateLimit.window(20, 60.0)
"""A window: twenty calls in any minute, spendable in a burst."""
DINGTALK = RateLimit(rate_per_s=19.0, burst=1, arrivals_per_s=20)
"""DingTalk's card API as its sink plans it: 19 a second, spaced, and 20 arrivals in any second."""


def _most_in_any(times: list[float], span_s: float) -> int:
    """The most grants in any stretch of ``span_s`` seconds, less the virtual clock's rounding (a millisecond or so:
    a bucket's grants come exactly a period apart, and the one that ends a stretch must not count in it)."""
    return max(sum(1 for other in times if at <= other < at + span_s - 0.05) for at in times)


async def _line_up(budget: RateBudget, limit: RateLimit, count: int, clock: Callable[[], float]) -> list[float]:
    """``count`` cards each waiting for one call of ``KEY`` at once; when each was granted."""
    granted: list[float] = []

    async def card(n: int) -> None:
        await budget.acquire(KEY, limit, f"card-{n}", priority=True)
        granted.append(clock())

    await asyncio.gather(*(card(n) for n in range(count)))
    return granted


# --- one process, virtual time ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "span_s", "learned"), [(BUCKET, 1.0, 5), (WINDOW, 60.0, 18)], ids=["bucket", "window"])
def test_callers_of_a_key_just_throttled_wait_out_the_pause_then_go_at_the_learned_rate(
    limit: RateLimit, span_s: float, learned: int
) -> None:
    """A 429 with Retry-After 2: no caller of the key goes before the pause ends, then never more than the learned
    limit in any second (a bucket: half its rate) or window (a window: what it held, a step at most below), until a
    quiet period gives a step back."""

    async def scenario() -> tuple[float, list[float], list[float]]:
        clock = asyncio.get_running_loop().time
        budget = RateBudget(clock=clock)
        sent = [clock() for n in range(10) if budget.try_acquire(KEY, limit, f"early-{n}", priority=True)]
        throttled_at = clock()
        budget.pause(KEY, 2.0)  # one of them was answered 429, Retry-After: 2
        [estimate] = budget.estimates()
        assert (estimate.configured, estimate.throttles) == (limit, 1)
        assert (estimate.learned.burst if limit.windowed else estimate.learned.rate_per_s) == learned
        return throttled_at, sent, await _line_up(budget, limit, 30, clock)

    throttled_at, sent, granted = in_virtual_time(scenario)
    assert len(sent) == 10 and len(granted) == 30
    assert min(granted) >= throttled_at + 2.0  # the whole key waited, not just the throttled call
    quiet_ends = throttled_at + 2.0 + Learning().period_s(limit)
    assert _most_in_any([at for at in granted if at < quiet_ends], span_s) == learned  # never a volley past it


def test_a_volley_answered_429_lowers_the_estimate_once_and_counts_every_throttle() -> None:
    clock = _Clock()
    budget = RateBudget(clock=clock)
    for n in range(5):
        assert budget.try_acquire(KEY, BUCKET, f"card-{n}")
    for _ in range(5):
        budget.pause(KEY, 1.0)  # the five calls were on their way together: five 429s, one lesson
    [estimate] = budget.estimates()
    assert estimate.throttles == 5 and estimate.share == 0.5
    clock.now += 1.0
    budget.pause(KEY, 1.0)  # a call sent after the pause was throttled too: that one teaches again
    assert budget.estimates()[0].share == 0.25


def test_quiet_gives_the_limit_back_step_by_step_never_past_the_configured_one_nor_below_the_floor() -> None:
    clock = _Clock()
    learning = Learning(quiet_s=10.0, step=0.1, floor=0.2)
    budget = RateBudget(clock=clock, ledger=LocalLedger(clock=clock, learning=learning))
    assert budget.try_acquire(KEY, BUCKET, "card")
    budget.pause(KEY, 2.0)
    shares = []
    for _ in range(8):
        shares.append(round(budget.estimates()[0].share, 6))
        clock.now += 10.0
    assert shares == [0.5, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0]  # quiet counts from the pause's end
    assert budget.estimates()[0].learned == BUCKET
    for _ in range(4):
        budget.pause(KEY, 1.0)
        clock.now += 1.0
    assert budget.estimates()[0].share == 0.2  # 1 → 0.5 → 0.25 → the floor


async def test_a_limit_on_arrivals_is_learned_with_the_rate() -> None:
    """DingTalk's 403 QpsLimit: the rate and the arrivals a second are both halved, each in whole calls."""
    clock = _Clock()
    budget = RateBudget(clock=clock)
    assert budget.try_acquire(KEY, DINGTALK, "card")
    budget.landed(KEY)
    budget.pause(KEY, 1.0)
    learned = budget.estimates()[0].learned
    assert (learned.rate_per_s, learned.burst, learned.arrivals_per_s) == (9.5, 1, 10)
    clock.now += 1.0  # the pause is over; a card tries a call every 20 ms for two seconds, each answered at once
    for _ in range(100):
        if budget.try_acquire(KEY, DINGTALK, "card"):
            budget.landed(KEY)
        clock.now += 0.02
    assert 10 <= budget.granted(KEY) - 1 <= 19  # two seconds at 9.5 calls a second (not 19), from an empty bucket


def test_a_card_call_answered_429_pauses_the_key_it_drew_from_for_every_card() -> None:
    """Through the card caller: the throttle is reported on the key the call was granted, even when the sink plans
    the next try on another bucket; another card's call on that key waits the pause out too."""

    async def scenario() -> tuple[list[float], list[float], dict[str, tuple[int, float]]]:
        clock = asyncio.get_running_loop().time
        budget = RateBudget(clock=clock)
        keys = iter(["slack:T1:chat.startStream"])  # the first try streams; the sink then plans a message
        made: list[float] = []

        async def throttled_once() -> None:
            made.append(clock())
            if len(made) == 1:
                raise RateLimited(retry_after=2.0)

        card = CardCaller(budget, lambda op: (next(keys, "slack:T1:post:C1"), BUCKET), owner="card-1",
                          platform="slack")
        other = CardCaller(budget, lambda op: ("slack:T1:chat.startStream", BUCKET), owner="card-2", platform="slack")
        other_made: list[float] = []

        async def other_call() -> None:
            other_made.append(clock())

        assert await card.call("create", throttled_once, deadline=None) == CallOutcome.OK
        assert await other.call("create", other_call, deadline=None) == CallOutcome.OK
        seen = {e.key: (e.throttles, e.share) for e in budget.estimates()}
        return made, other_made, seen

    made, other_made, seen = in_virtual_time(scenario)
    assert seen["slack:T1:chat.startStream"] == (1, 0.5)  # the key the throttled call drew from learned it
    assert seen["slack:T1:post:C1"] == (0, 1.0)
    assert other_made[0] >= made[0] + 2.0  # the other card's call on that key waited the Retry-After out


def test_estimates_tell_of_the_keys_used_last_and_no_more() -> None:
    budget = RateBudget(clock=_Clock())
    for n in range(SHOWN_KEYS + 50):
        budget.try_acquire(f"slack:T1:post:C{n:04d}", BUCKET, "card")
    keys = [estimate.key for estimate in budget.estimates()]
    assert len(keys) == SHOWN_KEYS and keys[0] == "slack:T1:post:C0050"  # the first 50 channels left the list


async def test_the_status_page_shows_each_keys_configured_and_learned_limit_and_throttles(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    await store.open()
    try:
        budget = RateBudget(clock=_Clock())
        assert budget.try_acquire(KEY, DINGTALK, "card")
        assert budget.try_acquire("slack:T1:chat.update", WINDOW, "card")
        budget.pause(KEY, 2.0)
        status = await console_status(StatusParts(store=store, budget=lambda: budget))
    finally:
        await store.close()
    rows = {row["key"]: row for row in status["budgets"]}
    assert {k: rows[KEY][k] for k in ("limit", "learned", "throttles")} == {
        "limit": "19/s burst 1, 20/1s arriving", "learned": "9.5/s burst 1, 10/1s arriving", "throttles": 1}
    assert {k: rows["slack:T1:chat.update"][k] for k in ("limit", "learned", "throttles")} == {
        "limit": "20/60s", "learned": "20/60s", "throttles": 0}


async def test_metrics_show_each_keys_configured_and_learned_limit_and_throttles(tmp_path: Path) -> None:
    config = parse_config({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "m.db")},
                           "metrics": {"enabled": True}, "http": {"host": "127.0.0.1", "port": 0}}, env={})
    async with build_runtime(config) as runtime:
        assert runtime.http is not None
        await runtime.http.start()
        assert runtime.budget.try_acquire(KEY, DINGTALK, "card")
        assert runtime.budget.try_acquire("slack:T1:chat.update", WINDOW, "card")
        runtime.budget.pause(KEY, 2.0)  # DingTalk answered 403 QpsLimit
        runtime.budget.pause(KEY, 2.0)  # and again, for a call already on its way
        async with aiohttp.ClientSession() as http, http.get(f"{runtime.http.url}/metrics") as response:
            body = await response.text()
    lines = set(body.splitlines())
    assert f'botgateway_rate_limit_configured_per_s{{key="{KEY}"}} 19.0' in lines
    assert f'botgateway_rate_limit_learned_per_s{{key="{KEY}"}} 9.5' in lines
    assert f'botgateway_rate_limit_throttles_total{{key="{KEY}"}} 2.0' in lines
    window = WINDOW.burst / WINDOW.window_s
    assert f'botgateway_rate_limit_learned_per_s{{key="slack:T1:chat.update"}} {window!r}' in lines
    assert 'botgateway_rate_limit_throttles_total{key="slack:T1:chat.update"} 0.0' in lines
    assert "# TYPE botgateway_turns_total counter" in lines  # the registry's own metrics are still there


# --- a fleet on one Redis -----------------------------------------------------------------------------------------


class _Clock:
    """Time the test moves by hand (the scripts and every process of a fleet read the same)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class _Watched(CountsRefusals, SharedLedger):
    """A process's shared ledger telling the test each call it refuses its line (the moment a waiting call is known
    not to go), awaitable with :meth:`refused`."""

    refusal_wait_s = 20.0  # a shared ledger hears of its turn through Redis polls


class _Fleet:
    """Processes sharing the test's Redis under a prefix of their own, on one clock."""

    def __init__(self) -> None:
        self.prefix = unique_prefix()
        self.clock = _Clock()
        self.ledgers: list[SharedLedger] = []

    def process(self, name: str) -> _Watched:
        redis = RedisLedger.connect(REDIS_URL, prefix=self.prefix, instance_id=name, clock=self.clock)
        ledger = _Watched(redis, share=2, refresh_s=3600.0, poll_s=0.05)
        self.ledgers.append(ledger)
        return ledger


@pytest.fixture
async def fleet() -> AsyncIterator[_Fleet]:
    fleet = _Fleet()
    try:
        yield fleet
    finally:
        for ledger in fleet.ledgers:
            await ledger.aclose()
        await purge_prefix(fleet.prefix)


async def test_a_throttle_heard_by_one_process_paces_another_processes_line_at_the_learned_rate(fleet: _Fleet) -> None:
    a, b = fleet.process("a"), fleet.process("b")
    assert (await a.take(KEY, BUCKET, live=False, later=False)).granted
    a.pause(KEY, 2.0)  # a's call was answered 429, Retry-After: 2
    await a.settle()
    budget = RateBudget(clock=fleet.clock, ledger=b)
    waiting = [asyncio.create_task(budget.acquire(KEY, BUCKET, f"card-{n}", priority=True)) for n in range(20)]
    try:
        await b.refused(1)
        fleet.clock.now += 2.0  # the pause ends: the bucket restarts empty, for b too
        await b.refused(b.refusals + 1)
        assert not any(task.done() for task in waiting)
        fleet.clock.now += 1.0  # a second at the learned rate: 5 calls, not 10
        await _until_done(waiting, 5)
        await b.refused(b.refusals + 1)  # the line asked again and was told to wait: nothing more went
        assert sum(task.done() for task in waiting) == 5
        fleet.clock.now += 1.0
        await _until_done(waiting, 10)
        await b.refused(b.refusals + 1)
        assert sum(task.done() for task in waiting) == 10
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    [estimate] = budget.estimates()  # b was told by Redis what a's throttle taught
    assert (estimate.share, estimate.throttles, estimate.learned.rate_per_s) == (0.5, 1, 5.0)


@pytest.mark.parametrize("limit", [BUCKET, WINDOW, DINGTALK], ids=["bucket", "window", "arrivals"])
async def test_the_fleet_learns_exactly_as_one_process_does(fleet: _Fleet, limit: RateLimit) -> None:
    """The same throttles at the same times: Redis's scripts and the in-memory ledger learn the same shares and
    count the same throttles (a volley's, a later one's), and give the same back in quiet."""
    a, b = fleet.process("a"), fleet.process("b")
    alone = LocalLedger(clock=fleet.clock)
    for _ in range(12):
        for ledger in (alone, a):
            if (await ledger.take(KEY, limit, live=False, later=False)).granted:
                ledger.landed(KEY)
    shares: dict[str, list[tuple[float, int]]] = {"alone": [], "fleet": []}
    for step_s, throttles in ((0.0, 3), (2.5, 0), (30.0, 1), (1.0, 1), (45.0, 0), (60.0, 0), (300.0, 0)):
        fleet.clock.now += step_s
        for _ in range(throttles):
            alone.pause(KEY, 2.0)
            a.pause(KEY, 2.0)
        await a.settle()
        answer = await b.take(KEY, limit, live=False, later=False)  # any process sees the fleet's lesson
        assert answer.granted == (await alone.take(KEY, limit, live=False, later=False)).granted
        for ledger, name in ((alone, "alone"), (b, "fleet")):
            estimate = ledger.estimate(KEY, limit)
            shares[name].append((round(estimate.share, 9), estimate.throttles))
            if answer.granted:
                ledger.landed(KEY)
    assert shares["fleet"] == shares["alone"]
    assert shares["alone"][0][1] == 3 and shares["alone"][-1] == (1.0, 5)
    assert min(share for share, _ in shares["alone"]) < 1.0


async def _until_done(tasks: list[asyncio.Task[float]], count: int) -> None:
    async with asyncio.timeout(20):
        while sum(task.done() for task in tasks) < count:
            await asyncio.wait([task for task in tasks if not task.done()], return_when=asyncio.FIRST_COMPLETED)


def test_the_learning_knobs_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        Learning(decrease=0.0)
    with pytest.raises(ValueError):
        Learning(quiet_s=0.0)
    assert Learned().share_at(Learning(), BUCKET, 0.0) == 1.0
