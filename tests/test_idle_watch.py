"""IdleWatch: each wait of a stream bounded, by one timer per stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from botgateway.model import IdleWatch
from tests.parked import parked
from tests.timer_loop import TimerCountingLoop
from tests.virtual_time import advance, in_virtual_time


async def items(gaps: list[asyncio.Event]) -> AsyncIterator[int]:
    """Yields one item each time the next event is set."""
    for number, gap in enumerate(gaps):
        await gap.wait()
        yield number


def test_a_wait_that_lasts_idle_s_raises_timeout() -> None:
    async def scenario() -> float:
        never = asyncio.Event()
        watch = IdleWatch(0.05)
        with pytest.raises(TimeoutError):
            await watch.next(items([never]))
        watch.close()
        return asyncio.get_running_loop().time()

    assert in_virtual_time(scenario) == pytest.approx(0.05)  # raised when the wait had lasted idle_s, not later


def test_items_that_keep_coming_pass_and_time_between_waits_does_not_count() -> None:
    async def scenario() -> None:
        ready = [asyncio.Event() for _ in range(4)]
        for event in ready[:3]:
            event.set()
        stream = items(ready)
        watch = IdleWatch(0.05)
        assert await watch.next(stream) == 0
        advance(0.1)  # the consumer is slow (the loop is held): not the model's silence
        assert await watch.next(stream) == 1
        await asyncio.sleep(0.1)  # the timer fires between waits: nothing to bound then
        assert await watch.next(stream) == 2
        asyncio.get_running_loop().call_later(0.04, ready[3].set)  # within idle_s of the wait, however late
        assert await watch.next(stream) == 3
        watch.close()

    in_virtual_time(scenario)


async def test_a_stop_of_the_task_stays_a_cancellation() -> None:
    never = asyncio.Event()
    watch = IdleWatch(30)
    waiting = await parked(watch.next(items([never])))  # inside its wait
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    watch.close()


def test_many_quick_waits_arm_one_timer() -> None:
    async def scenario() -> None:
        ready = [asyncio.Event() for _ in range(500)]
        for event in ready:
            event.set()
        stream = items(ready)
        watch = IdleWatch(30)
        for number in range(500):
            assert await watch.next(stream) == number
        watch.close()

    with asyncio.Runner(loop_factory=TimerCountingLoop) as runner:
        runner.run(scenario())
        loop = runner.get_loop()
        assert isinstance(loop, TimerCountingLoop) and loop.timers <= 1  # asyncio.timeout per wait: 500
