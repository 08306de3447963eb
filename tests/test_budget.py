"""The budget planner's invariants, with a clock the test moves (no timing in the assertions).

A window-shaped limit (Slack's per-minute tiers) may be spent in a burst but
never past its count; every open card reserves its final call, and live
updates get only what the reservations leave, least-served first.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from botgateway.budget import LocalLedger, RateBudget, RateLimit, WouldWait
from tests.parked import parked
from tests.watched_ledger import WatchedLedger

KEY = "slack:T1:chat.update"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watched() -> tuple[Clock, WatchedLedger, RateBudget]:
    """A budget on a clock the test moves, whose ledger tells the test what it refused."""
    clock = Clock()
    ledger = WatchedLedger(clock=clock)
    return clock, ledger, RateBudget(clock=clock, ledger=ledger)


async def test_a_window_may_be_spent_in_a_burst_but_never_past_its_count() -> None:
    clock, ledger, budget = watched()
    limit = RateLimit.window(5, 60.0)
    waits = [await budget.acquire(KEY, limit, f"card-{i}") for i in range(5)]
    assert waits == [0.0] * 5  # the whole window's allowance at once
    sixth = await parked(budget.acquire(KEY, limit, "card-5"))
    await ledger.refused(1)  # the dispatcher asked for the sixth call and was told to wait
    assert not sixth.done() and budget.available(KEY, limit) == 0
    clock.now += 59.0
    assert budget.available(KEY, limit) == 0  # still the same window
    clock.now += 1.0
    budget.release(KEY, "nobody")  # wakes the dispatcher, whose own sleep runs on real time
    await asyncio.wait_for(sixth, 5)
    assert budget.granted(KEY) == 6


async def test_finals_are_never_starved_by_live_updates() -> None:
    clock, ledger, budget = watched()
    limit = RateLimit.window(4, 60.0)
    for card in ("a", "b", "c"):
        budget.reserve(KEY, limit, card)  # three open cards, each will need its final call
    assert await budget.acquire(KEY, limit, "x") == 0.0  # 4 - 3 reserved: one call is free for live updates
    live = await parked(budget.acquire(KEY, limit, "y"))
    await ledger.refused(1)
    assert not live.done()  # a second live update would take a final's call
    for card in ("a", "b", "c"):
        assert await budget.acquire(KEY, limit, card, priority=True) == 0.0  # each final goes at once
        budget.unreserve(KEY, card)  # …and landed
    await ledger.refused(2)  # woken by the landed finals, the dispatcher asked again
    assert budget.reserved(KEY) == 0 and not live.done()  # the window is spent now
    clock.now += 60.0
    budget.release(KEY, "a")
    await asyncio.wait_for(live, 5)


async def test_a_released_reservation_frees_its_call_for_live_updates_at_once() -> None:
    _, ledger, budget = watched()
    limit = RateLimit.window(2, 60.0)
    budget.reserve(KEY, limit, "a")
    budget.reserve(KEY, limit, "b")
    live = await parked(budget.acquire(KEY, limit, "x"))
    await ledger.refused(1)
    assert not live.done()
    budget.release(KEY, "a")  # card a ended another way (a fallback, a stop)
    await asyncio.wait_for(live, 5)
    assert budget.reserved(KEY) == 1


async def test_the_reserved_budget_never_goes_negative() -> None:
    rng = random.Random(7)
    budget = RateBudget(clock=Clock())
    limit = RateLimit.window(10_000, 60.0)  # never blocks: the test is about the bookkeeping
    held: dict[str, int] = {}
    for _ in range(2000):
        owner = f"card-{rng.randrange(8)}"
        op = rng.choice(["reserve", "release", "final", "landed", "live"])
        if op == "reserve":
            budget.reserve(KEY, limit, owner)
            held[owner] = held.get(owner, 0) + 1
        elif op == "release":
            budget.release(KEY, owner)
            held.pop(owner, None)
        elif op == "final":
            await budget.acquire(KEY, limit, owner, priority=True)  # a try: the call stays reserved until it lands
        elif op == "landed":
            budget.unreserve(KEY, owner)
            if held.get(owner):
                held[owner] -= 1
        else:
            await budget.acquire(KEY, limit, owner)  # a live update uses no reservation
        assert budget.reserved(KEY) == sum(held.values()) >= 0


async def test_live_updates_go_least_served_first() -> None:
    clock, ledger, budget = watched()
    limit = RateLimit.window(3, 60.0)
    for _ in range(2):
        await budget.acquire(KEY, limit, "chatty")  # already showed two updates
    await budget.acquire(KEY, limit, "other")
    first = await parked(budget.acquire(KEY, limit, "chatty"))
    await ledger.refused(1)  # the window is spent
    second = await parked(budget.acquire(KEY, limit, "quiet"))  # shows nothing yet
    assert budget.waiting(KEY) == 2 and not first.done() and not second.done()
    budget.reserve(KEY, limit, "r1")
    budget.reserve(KEY, limit, "r2")
    clock.now += 60.0  # a new window: 3 calls, 2 of them reserved, so one live update may go
    budget.release(KEY, "other")
    await asyncio.wait_for(second, 5)  # the card showing nothing yet goes first, though it came later
    await ledger.refused(2)  # then the dispatcher asked for the chatty card's call: the rest is reserved
    assert not first.done()
    budget.release(KEY, "r1")
    await asyncio.wait_for(first, 5)


async def test_a_throttle_in_a_window_lowers_its_allowance_and_a_quiet_window_gives_some_back() -> None:
    clock = Clock()
    budget = RateBudget(clock=clock)
    limit = RateLimit.window(20, 60.0)
    for i in range(10):
        await budget.acquire(KEY, limit, f"card-{i}")
    budget.pause(KEY, 5.0)  # throttled at 10 calls in the window: Slack counts more than we do
    assert budget.available(KEY, limit) == 0
    clock.now += 5.0
    assert budget.available(KEY, limit) == 20 * 0.9 - 10  # one step lower (18), not all the way down to 10
    clock.now += 120.0  # two quiet windows
    assert budget.available(KEY, limit) == 20  # grown back to the configured size


async def test_once_a_window_runs_low_later_updates_are_paced_and_a_new_cards_first_text_still_goes() -> None:
    clock = Clock()
    budget = RateBudget(clock=clock)
    limit = RateLimit.window(20, 60.0)
    for _ in range(11):
        await budget.acquire(KEY, limit, "chatty")  # greedy while more than half the window is to spare
    assert budget.try_acquire(KEY, limit, "chatty")  # the first paced update of this 6 s slice
    assert not budget.try_acquire(KEY, limit, "chatty")  # the slice's share is spent: it waits
    assert budget.try_acquire(KEY, limit, "fresh")  # a card showing nothing yet is not paced
    clock.now += 6.0
    assert budget.try_acquire(KEY, limit, "chatty")  # the next slice


def test_a_bucket_counts_a_call_sent_late_from_when_it_went_out() -> None:
    """DingTalk counts calls as they arrive: calls granted on time but sent after a busy moment would arrive
    bunched; the bucket spaces what is sent by taking the tokens that accrued meanwhile."""
    clock = Clock()
    ledger = LocalLedger(clock=clock)
    qps = RateLimit(rate_per_s=16.0, burst=1)  # a call every 62.5 ms (times exact in binary)
    key = "dingtalk:robot:card"
    assert ledger.take_now(key, qps, live=False, later=False)
    clock.now += 0.0625
    assert ledger.take_now(key, qps, live=False, later=False)  # on time
    ledger.late(key, 0.25)  # ...but this one went out 250 ms after its grant
    clock.now += 0.0625
    assert not ledger.take_now(key, qps, live=False, later=False)  # 62.5 ms after the grant, not after it went
    clock.now += 0.1875
    assert not ledger.take_now(key, qps, live=False, later=False)
    clock.now += 0.0625
    assert ledger.take_now(key, qps, live=False, later=False)  # 62.5 ms after it went out

    window = RateLimit.window(5, 60.0)  # a minute's window is not moved by such delays
    assert ledger.take_now("slack:T1:chat.update", window, live=False, later=False)
    ledger.late("slack:T1:chat.update", 0.25)
    assert ledger.available("slack:T1:chat.update", window) == 4


def test_a_limit_on_arrivals_counts_a_call_until_a_second_after_its_answer() -> None:
    """DingTalk counts calls as they arrive, and the network may hold calls sent apart and deliver them together:
    a call counts from its grant, all the time it may be on its way, until a second after its answer."""
    clock = Clock()
    ledger = LocalLedger(clock=clock)
    qps = RateLimit(rate_per_s=1000.0, burst=1000, arrivals_per_s=3)
    key = "dingtalk:robot:card"
    for _ in range(3):
        assert ledger.take_now(key, qps, live=False, later=False)
    assert not ledger.take_now(key, qps, live=False, later=False)  # three on their way may arrive in one second
    clock.now += 5.0
    assert not ledger.take_now(key, qps, live=False, later=False)  # still on their way: however late they arrive
    ledger.landed(key)
    assert not ledger.take_now(key, qps, live=False, later=False)  # it may have arrived just before its answer
    clock.now += 0.5
    assert not ledger.take_now(key, qps, live=False, later=False)
    clock.now += 0.5
    assert ledger.take_now(key, qps, live=False, later=False)  # a second after its answer, it is out of any second
    assert ledger.available(key, qps) == 0
    ledger.give_back(key)  # granted, never sent
    assert ledger.available(key, qps) == 1
    assert qps.share(2).arrivals_per_s == 1 and RateLimit(rate_per_s=20.0).share(2).arrivals_per_s == 0


async def test_a_patient_caller_hears_at_once_when_a_spent_window_frees_no_call_in_time() -> None:
    clock, ledger, budget = watched()
    limit = RateLimit.window(2, 60.0)
    for card in ("a", "b"):
        await budget.acquire(KEY, limit, card)  # the window is spent (by another replica, in a fleet)
    clock.now += 10.0
    patient = await parked(budget.acquire(KEY, limit, "c", priority=True, patience_s=1.0))
    stubborn = await parked(budget.acquire(KEY, limit, "d", priority=True))
    await ledger.refused(1)
    with pytest.raises(WouldWait) as said:
        await patient
    assert said.value.free_in_s == pytest.approx(50.0)  # the first grant leaves the window in 50 s
    assert not stubborn.done() and budget.waiting(KEY) == 1  # a caller without patience waits on
    # The refusal is remembered: the next patient caller is told without asking the ledger again.
    with pytest.raises(WouldWait):
        await budget.acquire(KEY, limit, "e", priority=True, patience_s=1.0)
    assert ledger.refusals == 1
    clock.now += 50.0
    budget.release(KEY, "nobody")
    await asyncio.wait_for(stubborn, 5)
    assert budget.granted(KEY) == 3  # nothing was taken for the callers that left


async def test_a_patient_caller_waits_for_a_call_that_comes_within_its_patience() -> None:
    clock, ledger, budget = watched()
    limit = RateLimit.window(1, 60.0)
    await budget.acquire(KEY, limit, "a")
    clock.now += 59.5
    waiting = await parked(budget.acquire(KEY, limit, "b", priority=True, patience_s=1.0))
    await ledger.refused(1)
    assert not waiting.done()  # free in 0.5 s: worth waiting for
    clock.now += 0.5
    budget.release(KEY, "nobody")
    await asyncio.wait_for(waiting, 5)


async def test_a_final_is_promised_only_while_the_window_has_a_call_beyond_the_reservations() -> None:
    clock, _, budget = watched()
    limit = RateLimit.window(3, 60.0)
    await budget.acquire(KEY, limit, "spent")
    assert await budget.claim(KEY, limit, "card-a") and await budget.claim(KEY, limit, "card-b")
    assert not await budget.claim(KEY, limit, "card-c") and budget.reserved(KEY) == 2  # nothing kept for c
    clock.now += 60.0  # the spent call leaves the window
    assert await budget.claim(KEY, limit, "card-c")


def test_a_windows_call_counts_from_its_answer_so_a_late_arrival_cannot_overrun_the_next_window() -> None:
    """Slack counts a call when it arrives, somewhere between its grant and its answer: the window slides from the
    answer, so a call that took long to arrive is still in Slack's window when ours would have let it go."""
    clock = Clock()
    ledger = LocalLedger(clock=clock)
    tier = RateLimit.window(2, 60.0)
    assert ledger.take_now(KEY, tier, live=False, later=False)
    assert ledger.take_now(KEY, tier, live=False, later=False)
    clock.now += 10.0
    ledger.landed(KEY)  # the first answered at once (it was granted at 1000, answered at 1010)...
    clock.now += 50.0
    ledger.landed(KEY)  # ...the second only a minute after its grant: Slack may have counted it just now
    assert not ledger.take_now(KEY, tier, live=False, later=False)  # a minute from the grants, not the answers
    clock.now += 10.0
    assert ledger.take_now(KEY, tier, live=False, later=False)  # a minute after the first answer
    assert not ledger.take_now(KEY, tier, live=False, later=False)
    clock.now += 50.0
    assert ledger.take_now(KEY, tier, live=False, later=False)  # a minute after the second answer


def test_a_limit_on_arrivals_counts_over_its_own_window() -> None:
    """A Slack channel takes three new messages in any three seconds: each counts until three seconds after its
    answer, and its window restarts a round trip late, never a share of the window late."""
    clock = Clock()
    ledger = LocalLedger(clock=clock)
    channel = RateLimit(rate_per_s=1.0, burst=3, arrivals_per_s=3, arrival_window_s=3.0)
    key = "slack:T1:post:C1"
    for _ in range(3):
        assert ledger.take_now(key, channel, live=False, later=False)
        ledger.landed(key)
    clock.now += 0.25
    assert not ledger.take_now(key, channel, live=False, later=False)
    clock.now += 2.5
    assert not ledger.take_now(key, channel, live=False, later=False)  # 2.75 s after the answers
    clock.now += 0.25
    assert [ledger.take_now(key, channel, live=False, later=False) for _ in range(4)] == [True, True, True, False]
    assert channel.share(2).arrival_window_s == 3.0


def test_live_updates_leave_the_open_cards_finals_a_seconds_calls_and_keep_a_trickle() -> None:
    """Under a limit on arrivals, a live update sent just before a burst of answers ends holds a final back for a
    second: live updates only count against what the reserved finals leave, a tenth of the second at least."""
    clock = Clock()
    ledger = LocalLedger(clock=clock)
    qps = RateLimit(rate_per_s=1000.0, burst=1000, arrivals_per_s=20)
    key = "dingtalk:robot:card"
    for card in range(15):
        ledger.reserve(key, qps, f"card-{card}")
    live = [ledger.take_now(key, qps, live=True, later=True) for _ in range(6)]
    assert live == [True] * 5 + [False]  # 20 - 15 reserved
    for card in range(15, 40):
        ledger.reserve(key, qps, f"card-{card}")
    assert not ledger.take_now(key, qps, live=True, later=True)  # 40 finals would fill the second: 2 for live...
    clock.now += 1.0
    for _ in range(5):
        ledger.landed(key)
    clock.now += 1.0
    assert [ledger.take_now(key, qps, live=True, later=True) for _ in range(3)] == [True, True, False]  # ...a trickle
    assert all(ledger.take_now(key, qps, live=False, later=False) for _ in range(18))  # finals take the rest
    assert not ledger.take_now(key, qps, live=False, later=False)
