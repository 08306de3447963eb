"""The circuit breaker of one model endpoint, on a clock the test moves."""

from __future__ import annotations

import pytest

from botgateway.model import Attempt, CircuitBreaker
from tests.adapters.log_lines import captured_log


class Clock:
    """Monotonic seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, failures: int = 2, cooldown_s: float = 60.0) -> CircuitBreaker:
    return CircuitBreaker("primary/m", failures=failures, cooldown_s=cooldown_s, clock=clock)


def fail(b: CircuitBreaker) -> None:
    attempt = b.try_acquire()
    assert attempt is not None
    b.failed(attempt)


def acquired(b: CircuitBreaker) -> Attempt:
    attempt = b.try_acquire()
    assert attempt is not None
    return attempt


def test_it_opens_after_the_configured_consecutive_failures_only() -> None:
    clock = Clock()
    b = breaker(clock, failures=2)
    fail(b)
    assert b.state == "closed"
    b.succeeded(acquired(b))  # a success in between: the count starts again
    fail(b)
    assert b.state == "closed"
    fail(b)
    assert b.state == "open"
    assert not b.try_acquire()


def test_after_the_cooldown_exactly_one_trial_runs_and_its_success_closes_it() -> None:
    clock = Clock()
    b = breaker(clock, failures=1, cooldown_s=60)
    fail(b)
    clock.now += 59.9
    assert b.state == "open" and not b.try_acquire()
    clock.now += 0.1
    assert b.state == "half_open"
    trial = acquired(b)
    assert trial.trial
    assert not b.try_acquire()  # everyone else keeps skipping it meanwhile
    b.succeeded(trial)
    assert b.state == "closed" and b.try_acquire() and b.try_acquire()


def test_a_failed_trial_opens_it_for_a_whole_new_cooldown() -> None:
    clock = Clock()
    b = breaker(clock, failures=3, cooldown_s=10)
    for _ in range(3):
        fail(b)
    clock.now += 10
    fail(b)  # one trial failure is enough, whatever the threshold
    assert b.state == "open"
    clock.now += 9
    assert not b.try_acquire()
    clock.now += 1
    assert b.try_acquire()


def test_a_trial_that_ends_without_an_outcome_lets_the_next_turn_try() -> None:
    clock = Clock()
    b = breaker(clock, failures=1, cooldown_s=5)
    fail(b)
    clock.now += 5
    b.released(acquired(b))  # stopped, or the request itself refused
    assert b.state == "half_open"
    assert b.try_acquire()


def test_only_the_trial_itself_ends_the_trial() -> None:
    clock = Clock()
    b = breaker(clock, failures=1, cooldown_s=5)
    fail(b)
    clock.now += 5
    trial = acquired(b)
    # Another turn found every endpoint cooling down and asked this one anyway; it was stopped, or refused.
    b.released(b.unacquired())
    assert not b.try_acquire()  # the trial still runs: nobody else may start a second one
    b.failed(b.unacquired())  # nor does another turn's failure end it (the breaker stays open)
    assert b.state == "half_open" and not b.try_acquire()
    b.released(trial)
    assert acquired(b).trial


def test_each_change_of_state_is_logged_once() -> None:
    clock = Clock()
    b = breaker(clock, failures=1, cooldown_s=5)
    with captured_log() as logs:
        fail(b)
        for _ in range(3):
            assert not b.try_acquire()
        clock.now += 5
        trial = acquired(b)
        assert not b.try_acquire()
        b.succeeded(trial)
        fail(b)
    events = [(line["event"], line["endpoint"]) for line in logs.since() if line["event"].startswith("llm_breaker")]
    assert events == [
        ("llm_breaker_open", "primary/m"),
        ("llm_breaker_half_open", "primary/m"),
        ("llm_breaker_closed", "primary/m"),
        ("llm_breaker_open", "primary/m"),
    ]


def test_a_threshold_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker("x", failures=0, cooldown_s=1)
