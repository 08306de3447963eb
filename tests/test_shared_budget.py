"""One rate budget for the whole fleet, in the real Redis: each ledger here stands for one process.

Every process has its own instance id and its own fair line in front of the
shared accounts; the clock is the test's (the scripts take the callers' time),
so a minute-long window is tested without waiting and no assertion depends on
timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from botgateway.budget import FLIGHT_S, LEASE_MOST, RateBudget, RateLimit, RedisLedger, SharedLedger
from tests.fakes.redis_server import RedisServer
from tests.fakes.stores import REDIS_URL, purge_prefix, unique_prefix

KEY = "slack:T1:chat.update"


class Clock:
    """Wall-clock time the test moves by hand (every process of the test reads the same one)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Fleet:
    """Ledgers standing for processes sharing one Redis (``url``) under the test's own key prefix."""

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        self.prefix = prefix
        self.url = url
        self.clock = Clock()
        self.ledgers: list[SharedLedger] = []

    def process(self, name: str, *, share: int = 3, reservation_ttl_s: float = 30.0) -> SharedLedger:
        """A process called ``name``; it refreshes its reservations only when the test says (never by itself)."""
        redis = RedisLedger.connect(self.url, prefix=self.prefix, instance_id=name, clock=self.clock,
                                    reservation_ttl_s=reservation_ttl_s)
        ledger = SharedLedger(redis, share=share, refresh_s=3600.0)
        self.ledgers.append(ledger)
        return ledger

    async def redis(self, command: Callable[[aioredis.Redis], object]) -> object:
        """Run one command on the test's Redis (to look at what the scripts keep)."""
        client = aioredis.Redis.from_url(self.url, decode_responses=True)
        try:
            return await command(client)  # type: ignore[misc]
        finally:
            await client.aclose()

    async def aclose(self) -> None:
        """Close every process's ledger."""
        for ledger in self.ledgers:
            await ledger.aclose()


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    fleet = Fleet(unique_prefix())
    try:
        yield fleet
    finally:
        await fleet.aclose()
        await purge_prefix(fleet.prefix)


@pytest.fixture
async def own_fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    """A fleet on a Redis of the test's own, for a test that counts the server's commands: on the shared one, the
    tests of other pytest-xdist workers (and other test runs) run scripts at the same time."""
    server = RedisServer(tmp_path)
    await server.start()
    fleet = Fleet(unique_prefix(), server.url)
    try:
        yield fleet
    finally:
        await fleet.aclose()
        server.kill()


async def _until_done(tasks: list[asyncio.Task[float]], count: int) -> None:
    """Wait until ``count`` of ``tasks`` have finished."""
    async with asyncio.timeout(20):
        while sum(task.done() for task in tasks) < count:
            await asyncio.wait([task for task in tasks if not task.done()], return_when=asyncio.FIRST_COMPLETED)


async def _cancel(tasks: list[asyncio.Task[float]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _grants(fleet: Fleet, ledger: SharedLedger, limit: RateLimit, *, live: bool, tries: int) -> int:
    verdicts = [await ledger.take(KEY, limit, live=live, later=False) for _ in range(tries)]
    return sum(verdict.granted for verdict in verdicts)


async def test_processes_together_never_grant_more_than_a_windows_limit(fleet: Fleet) -> None:
    limit = RateLimit.window(10, 60.0)
    processes = [fleet.process(name) for name in ("a", "b", "c")]
    verdicts = await asyncio.gather(*(processes[i % 3].take(KEY, limit, live=bool(i % 2), later=False)
                                      for i in range(60)))
    assert sum(verdict.granted for verdict in verdicts) == 10  # 60 calls at once from three processes
    fleet.clock.now += 59.0
    assert await _grants(fleet, processes[1], limit, live=False, tries=5) == 0  # still the same window
    fleet.clock.now += 1.0
    assert await _grants(fleet, processes[2], limit, live=False, tries=15) == 10  # a new window, for everyone

    # The same through each process's own fair line.
    fleet.clock.now += 60.0
    budgets = [RateBudget(ledger=ledger) for ledger in processes]
    waits = [asyncio.create_task(budgets[i % 3].acquire(KEY, limit, f"card-{i}", priority=i % 4 == 0))
             for i in range(24)]
    await _until_done(waits, 10)
    assert not (await processes[0].take(KEY, limit, live=False, later=False)).granted  # spent for everyone
    assert sum(task.done() for task in waits) == 10 and sum(budget.waiting(KEY) for budget in budgets) == 14
    fleet.clock.now += 60.0  # the lines ask again by themselves (every poll_s), and see the new window
    await _until_done(waits, 20)
    assert sum(task.done() for task in waits) == 20
    assert await fleet.redis(lambda r: r.zcard(f"{fleet.prefix}budget:{{{KEY}}}:grants")) == 10
    await _cancel(waits)


async def test_one_processes_reservations_keep_anothers_live_updates_off_them(fleet: Fleet) -> None:
    limit = RateLimit.window(6, 60.0)
    a, b = fleet.process("a"), fleet.process("b")
    a.reserve(KEY, limit, "card-1")
    a.reserve(KEY, limit, "card-2")  # two open cards on process a will need their finals
    await a.settle()
    assert await _grants(fleet, b, limit, live=True, tries=6) == 4  # b's live updates get what is left
    assert (await b.take(KEY, limit, live=False, later=False)).granted  # b's own final still goes
    assert b.spare(KEY, limit) == 0 and a.reserved(KEY) == 2 and b.reserved(KEY) == 0

    budget = RateBudget(ledger=b)
    live = asyncio.create_task(budget.acquire(KEY, limit, "card-3"))
    await asyncio.wait({live}, timeout=0)
    assert not live.done()
    a.release(KEY, "card-1")  # one card of a ended another way: one call left, still kept for card-2's final
    await a.settle()
    assert not (await b.take(KEY, limit, live=True, later=False)).granted
    a.release(KEY, "card-2")
    await a.settle()
    assert await asyncio.wait_for(live, 20) >= 0  # b's line hears of it on its next ask
    assert not (await a.take(KEY, limit, live=False, later=False)).granted  # the window is spent now


async def test_processes_planning_at_once_never_promise_more_finals_than_a_window_holds(fleet: Fleet) -> None:
    limit = RateLimit.window(4, 60.0)
    a, b = fleet.process("a"), fleet.process("b")
    assert (await a.take(KEY, limit, live=False, later=False)).granted  # one call of the window is spent
    # Both processes plan cards at the same moment, each from a view that shows the whole window free.
    claims = await asyncio.gather(*(ledger.claim(KEY, limit, f"card-{name}-{n}")
                                    for n in range(3) for name, ledger in (("a", a), ("b", b))))
    assert sum(claims) == 3  # 4 - 1 spent: never a promise the window cannot keep
    assert a.reserved(KEY) + b.reserved(KEY) == 3
    a.reserve(KEY, limit, "card-a-legacy")  # a reservation made without a claim is kept all the same ...
    await a.settle()
    assert not await b.claim(KEY, limit, "card-b-late")  # ... and counted against every later claim
    a.release(KEY, "card-a-legacy")
    for n in range(3):
        a.release(KEY, f"card-a-{n}")
    await a.settle()
    assert await b.claim(KEY, limit, "card-b-late")  # what a gave back can be promised again
    bucket = RateLimit(rate_per_s=1.0, burst=1)
    assert all([await b.claim("slack:T1:post:C1", bucket, f"card-{n}") for n in range(3)])  # a bucket refills


async def test_a_live_update_counted_before_its_own_processs_claim_landed_leaves_the_claimed_call_alone(
    fleet: Fleet,
) -> None:
    # One process plans a card (its claim on its way) while one of its cards asks for a live update: the update's
    # count of the process's reservations was made before the claim's answer, so it says none. Redis runs the
    # claim first; the update must still leave the promised call alone, or the card's final finds the window spent.
    limit = RateLimit.window(2, 60.0)
    redis = RedisLedger.connect(fleet.url, prefix=fleet.prefix, instance_id="a", clock=fleet.clock)
    try:
        assert await redis.claim(KEY, limit, 1)
        assert (await redis.take(KEY, limit, live=True, later=False, mine=0)).granted  # 2 - 1 promised: one is spare
        assert not (await redis.take(KEY, limit, live=True, later=False, mine=0)).granted  # the promised one is not
        assert (await redis.take(KEY, limit, live=False, later=False, mine=0)).granted  # the final gets it
    finally:
        await redis.aclose()


async def test_a_processes_reservations_vanish_once_it_stops_refreshing_them(fleet: Fleet) -> None:
    limit = RateLimit.window(3, 60.0)
    a, b = fleet.process("a", reservation_ttl_s=30.0), fleet.process("b")
    for card in ("c1", "c2", "c3"):
        a.reserve(KEY, limit, card)
    await a.settle()  # and then a is killed: nothing refreshes its reservations any more
    assert not (await b.take(KEY, limit, live=True, later=False)).granted
    fleet.clock.now += 29.0
    assert not (await b.take(KEY, limit, live=True, later=False)).granted
    fleet.clock.now += 1.5
    assert (await b.take(KEY, limit, live=True, later=False)).granted  # a's reservations expired with it
    assert await fleet.redis(lambda r: r.hlen(f"{fleet.prefix}budget:{{{KEY}}}:reserved")) == 0  # and were removed


async def test_a_throttle_seen_by_one_process_pauses_the_key_for_all(fleet: Fleet) -> None:
    bucket = RateLimit(rate_per_s=19.0, burst=19)  # a DingTalk app's card API, shared by every process
    a, b = fleet.process("a"), fleet.process("b")
    assert (await a.take("dingtalk:app", bucket, live=True, later=False)).granted
    a.pause("dingtalk:app", 5.0)  # DingTalk answered 403 QpsLimit to a
    await a.settle()
    assert not (await b.take("dingtalk:app", bucket, live=False, later=False)).granted
    assert b.paused_for("dingtalk:app") == 5.0
    budget = RateBudget(ledger=b)
    assert not budget.try_acquire("dingtalk:app", bucket, "card", priority=True)
    fleet.clock.now += 5.0
    assert not (await b.take("dingtalk:app", bucket, live=False, later=False)).granted  # restarted empty
    fleet.clock.now += 1.0
    assert (await b.take("dingtalk:app", bucket, live=False, later=False)).granted


async def test_a_shared_token_bucket_refills_at_the_platforms_rate(fleet: Fleet) -> None:
    bucket = RateLimit(rate_per_s=2.0, burst=2)
    a, b = fleet.process("a"), fleet.process("b")
    assert (await a.take("dingtalk:app", bucket, live=True, later=False)).granted
    assert (await b.take("dingtalk:app", bucket, live=True, later=False)).granted
    denied = await a.take("dingtalk:app", bucket, live=False, later=False)
    assert not denied.granted and 0 < denied.retry_in_s <= 0.5
    fleet.clock.now += 0.5
    assert (await b.take("dingtalk:app", bucket, live=True, later=False)).granted
    assert not (await a.take("dingtalk:app", bucket, live=True, later=False)).granted


async def test_a_throttle_in_a_shared_window_lowers_its_allowance_for_every_process(fleet: Fleet) -> None:
    limit = RateLimit.window(20, 60.0)
    a, b = fleet.process("a"), fleet.process("b")
    assert await _grants(fleet, a, limit, live=True, tries=10) == 10
    a.pause(KEY, 5.0)  # throttled at 10 calls in the window: Slack counts more than we do
    await a.settle()
    fleet.clock.now += 5.0
    assert await _grants(fleet, b, limit, live=False, tries=20) == 8  # one step lower (18 - 10), for b too


async def _script_calls(fleet: Fleet) -> int:
    """Scripts the shared Redis has run so far (every grant asked of it is one)."""
    stats = await fleet.redis(lambda r: r.info("commandstats"))
    assert isinstance(stats, dict)
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


async def test_a_bucket_serves_a_busy_line_in_a_few_round_trips(own_fleet: Fleet) -> None:
    """Many callers in line for a token bucket are granted together: one round trip to Redis serves the line,
    not one per call, so a busy process is not held back by its own round trips."""
    ledger = own_fleet.process("a", share=1)
    budget = RateBudget(clock=own_fleet.clock, ledger=ledger)
    bucket = RateLimit(rate_per_s=1.0, burst=60)
    before = await _script_calls(own_fleet)
    waits = [asyncio.create_task(budget.acquire("bench:update", bucket, f"card-{i}")) for i in range(60)]
    await asyncio.gather(*waits)
    assert await _script_calls(own_fleet) - before < 10  # one per call would be 60
    assert budget.granted("bench:update") == 60
    assert not (await ledger.take("bench:update", bucket, live=False, later=False)).granted  # spent fleet-wide


async def test_a_large_bucket_is_leased_so_most_calls_need_no_round_trip(own_fleet: Fleet) -> None:
    """Calls of a bucket far larger than the cards need are taken from Redis in batches ahead of need: most
    calls go at once, on the budget's synchronous path; all of them are counted in the shared bucket."""
    a, b = own_fleet.process("a", share=2), own_fleet.process("b", share=2)
    budget = RateBudget(clock=own_fleet.clock, ledger=a)
    large = RateLimit(rate_per_s=0.001, burst=1000)  # 500 a process: leased 64 at a time; no refill to speak of
    before = await _script_calls(own_fleet)
    at_once = 0
    for i in range(200):
        if budget.try_acquire("web:console", large, f"card-{i % 7}"):
            at_once += 1
        else:
            await budget.acquire("web:console", large, f"card-{i % 7}")
    assert at_once > 150  # the rest waited for a batch
    assert await _script_calls(own_fleet) - before < 15  # one per call would be 200
    # Counted in the shared bucket when taken: the calls made, and a's batch held ahead of need, no more.
    state = f"{own_fleet.prefix}budget:{{web:console}}:state"
    left = float(await own_fleet.redis(lambda r: r.hget(state, "tokens")))  # type: ignore[arg-type]
    assert 200 <= 1000 - left <= 200 + 2 * LEASE_MOST  # at most a batch and what was left of the one before
    assert (await b.take("web:console", large, live=False, later=False)).granted  # b takes from what is left
    a.pause("web:console", 1.0)  # a throttle: what a holds ahead must not go
    assert not budget.try_acquire("web:console", large, "card-0")


async def test_a_platform_sized_bucket_is_never_leased(fleet: Fleet) -> None:
    """DingTalk's bucket (a call at a time) is asked call by call: one process never holds another's call."""
    a, b = fleet.process("a"), fleet.process("b")
    bucket = RateLimit(rate_per_s=19.0, burst=1)
    assert not a.take_now("dingtalk:app", bucket, live=False, later=False)
    assert (await a.take("dingtalk:app", bucket, live=False, later=False)).granted
    assert not a.take_now("dingtalk:app", bucket, live=False, later=False)  # nothing held ahead
    assert not (await b.take("dingtalk:app", bucket, live=False, later=False)).granted


async def test_calls_on_their_way_count_against_arrivals_across_processes(fleet: Fleet) -> None:
    """DingTalk counts calls as they arrive: a call counts from its grant until a second after its answer, for every
    process, so calls several processes sent apart and a stall delivered together never push a second past the
    limit; a landing in another process frees the call within a poll, and a dead process's calls expire."""
    a, b, c = fleet.process("a"), fleet.process("b"), fleet.process("c")
    qps = RateLimit(rate_per_s=100.0, burst=100, arrivals_per_s=3)  # the bucket alone would grant far more
    granted = [await p.take("dingtalk:app", qps, live=False, later=False) for p in (a, b, c)]
    assert all(v.granted and v.count == 1 for v in granted)  # one call at a time: each has its own ticket
    held = await b.take("dingtalk:app", qps, live=False, later=False, want=5)
    assert not held.granted and 0 < held.retry_in_s <= 0.1  # three on their way, landing any moment: soon again
    fleet.clock.now += 5.0
    assert not (await b.take("dingtalk:app", qps, live=False, later=False)).granted  # a stall: still on their way
    a.landed("dingtalk:app")
    await a.settle()
    assert not (await c.take("dingtalk:app", qps, live=False, later=False)).granted  # answered: a second more
    fleet.clock.now += 1.0
    assert (await c.take("dingtalk:app", qps, live=False, later=False)).granted  # a second after a's answer
    arriving = f"{fleet.prefix}budget:{{dingtalk:app}}:arriving"
    assert await fleet.redis(lambda r: r.zcard(arriving)) == 3
    # A call given back, never made, does not count; b's and c's first calls, never answered (their processes
    # died on the way), stop counting after the longest flight.
    b.give_back("dingtalk:app", granted[1].ticket)
    await b.settle()
    assert await fleet.redis(lambda r: r.zcard(arriving)) == 2
    fleet.clock.now += FLIGHT_S - 5.0  # past the longest flight of the first calls, not of c's second
    assert [(await p.take("dingtalk:app", qps, live=False, later=False)).granted for p in (a, b, c, a)] == [
        True, True, False, False]


async def test_a_windows_call_counts_from_its_answer_for_the_whole_fleet(fleet: Fleet) -> None:
    """Slack counts a call on arrival: in Redis too a window's grant moves to its answer, so a call slow to arrive
    holds its slot until a window after Slack answered it, whichever process asks next."""
    a, b = fleet.process("a"), fleet.process("b")
    tier = RateLimit.window(2, 60.0)
    assert (await a.take(KEY, tier, live=False, later=False)).granted
    assert (await a.take(KEY, tier, live=False, later=False)).granted
    fleet.clock.now += 10.0
    a.landed(KEY)
    fleet.clock.now += 50.0
    a.landed(KEY)  # a minute after its grant
    await a.settle()
    assert not (await b.take(KEY, tier, live=False, later=False)).granted  # a minute from the grants: not yet
    fleet.clock.now += 10.0
    assert (await b.take(KEY, tier, live=False, later=False)).granted  # a minute from the first answer
    assert not (await b.take(KEY, tier, live=False, later=False)).granted


async def test_a_channels_arrivals_count_over_its_window_and_live_updates_leave_the_fleets_finals(fleet: Fleet) -> None:
    """A limit on arrivals over a window of its own (a Slack channel's three messages in three seconds) counts a
    call until a window after its answer in Redis; and live updates leave every process's reserved finals."""
    a, b = fleet.process("a"), fleet.process("b")
    channel = RateLimit(rate_per_s=1.0, burst=3, arrivals_per_s=3, arrival_window_s=3.0)
    for _ in range(3):
        assert (await a.take("slack:T1:post:C1", channel, live=False, later=False)).granted
        a.landed("slack:T1:post:C1")
    await a.settle()
    fleet.clock.now += 2.5
    assert not (await b.take("slack:T1:post:C1", channel, live=False, later=False)).granted
    fleet.clock.now += 0.5
    assert (await b.take("slack:T1:post:C1", channel, live=False, later=False)).granted

    qps = RateLimit(rate_per_s=1000.0, burst=1000, arrivals_per_s=20)
    for card in range(30):
        a.reserve("dingtalk:app", qps, f"card-{card}")
    await a.settle()  # the fleet hears of a's open cards
    live = [(await b.take("dingtalk:app", qps, live=True, later=True)).granted for _ in range(3)]
    assert live == [True, True, False]  # a tenth of the second: the rest is the finals'
    assert (await b.take("dingtalk:app", qps, live=False, later=False)).granted
