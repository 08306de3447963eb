"""The floor model of the benchmark (:mod:`bench.floor`): what the limits, generation and round trips allow."""

from __future__ import annotations

import math

import pytest

from bench.floor import (
    CHANNEL,
    DINGTALK_PLANS,
    Limit,
    Plan,
    PlanCall,
    best_schedule,
    calls_over_rate,
    dingtalk_limits,
    floor,
    ratio,
    scenario_floor,
    schedule,
    slack_limits,
    slack_plans,
)

GEN = 6.4
RTT = 0.05


def test_calls_wait_for_room_in_sliding_windows() -> None:
    edit = slack_plans("edit")[0]
    limits = slack_limits(post_burst=3)
    burst = [0.0] * 100
    # 100 final chat.update calls at 50/min, one channel each: half of them wait for the next window.
    done = sorted(schedule(edit, limits, burst, list(range(100)), gen_s=GEN))
    assert done[49] == pytest.approx(GEN) and done[50] == pytest.approx(GEN + 60)
    result = floor(edit, limits, burst, list(range(100)), gen_s=GEN)
    assert result["complete_s"]["p95"] == pytest.approx(GEN + 60)
    assert result["calls_over_rate_s"] == pytest.approx(120.0) and result["busiest_limit"] == "chat.update"
    # One channel, 3 messages per 3 s: the placeholders take the slots 0, 0, 0, 3, 3, 3; the updates follow.
    assert schedule(edit, limits, [0.0] * 6, [0] * 6, gen_s=1.0) == pytest.approx([1.0, 1.0, 1.0, 3.0, 3.0, 3.0])


def test_in_one_channel_the_kth_answer_waits_for_the_kth_message_slot() -> None:
    plans = slack_plans("auto", stream_starts_counted=True)
    result = scenario_floor(plans, slack_limits(3), [0.0] * 30, [0] * 30, GEN, RTT)
    best = result["best"]
    # max(generation, the k-th slot + a round trip) + the final call's round trip; a ready answer goes out as one
    # finished message in the first slot after generation.
    expected = [max(GEN, 3 * (k // 3) + RTT) + RTT if 3 * (k // 3) < GEN else 3 * (k // 3) + RTT for k in range(30)]
    assert best["per_answer"] == pytest.approx(expected)
    assert best["complete_s"]["p95"] == pytest.approx(27 + RTT) and best["complete_s"]["p50"] == pytest.approx(13.5 + RTT)
    assert "one message" in best["plan"]
    # Natives alone: Tier 2 takes 20 stream starts a minute, the 21st waits a minute.
    native = result["plans"][0]
    assert native["plan"] == "native" and native["complete_s"]["max"] > 60


def test_stream_starts_off_the_channel_bucket_lower_the_incident_floor() -> None:
    counted = scenario_floor(slack_plans("auto", stream_starts_counted=True), slack_limits(3), [0.0] * 30, [0] * 30, GEN, RTT)
    uncounted = scenario_floor(slack_plans("auto", stream_starts_counted=False), slack_limits(3), [0.0] * 30, [0] * 30,
                               GEN, RTT)
    # 20 native streams need no channel slot; the other 10 take the channel's slots 0–9 (the last one as a finished
    # message in the slot at 9 s).
    per_answer = uncounted["best"]["per_answer"]
    assert per_answer[:29] == pytest.approx([GEN + RTT] * 29) and per_answer[29] == pytest.approx(9 + RTT)
    assert uncounted["best"]["plan"].startswith("native ×20")
    assert uncounted["best"]["complete_s"]["p95"] < counted["best"]["complete_s"]["p95"]


def test_slack_n100_one_channel_each_is_floored_at_generation() -> None:
    result = scenario_floor(slack_plans("auto"), slack_limits(3), [0.0] * 100, list(range(100)), GEN, RTT)
    assert result["best"]["per_answer"] == pytest.approx([GEN + RTT] * 100)
    assert result["best"]["plan"] == "native ×20 + edit ×50 + one message ×30"


def test_dingtalk_finals_start_when_generation_ends_20_a_second() -> None:
    result = scenario_floor(DINGTALK_PLANS, dingtalk_limits(20), [0.0] * 100, list(range(100)), GEN, RTT)
    card, reply = result["plans"]
    assert card["calls_over_rate_s"] == pytest.approx(10.0)  # 200 calls at 20 QPS
    done = result["best"]["per_answer"]
    # Creations fill the seconds 0–4; the finals go 20 a second from the end of generation.
    assert [done[20 * k] for k in range(5)] == pytest.approx([GEN + k + RTT for k in range(5)])
    assert result["best"]["complete_s"]["p95"] == pytest.approx(GEN + 4 + RTT)
    # The markdown reply is shown, but a reply is not a card: the floor is the card's.
    assert reply["in_floor"] is False and reply["complete_s"]["p95"] == pytest.approx(GEN + RTT)
    assert result["best"]["plan"] == "card"


def test_a_call_on_two_limits_waits_for_both_and_a_reply_before_the_next_call() -> None:
    limits = {"a": Limit(1, 10.0), "b": Limit(1, 4.0, per_channel=True)}
    plan = Plan("two", (PlanCall(("a", "b"), False), PlanCall(("b",), True)))
    # Answer 0: a+b at 0, then b again once 4 s passed (and generation ended at 1). Answer 1 (another channel):
    # "a" is taken until 10.
    done = schedule(plan, limits, [0.0, 0.0], [0, 1], gen_s=1.0, latency_s=0.5)
    assert done == pytest.approx([4.5, 14.5])
    assert calls_over_rate(plan, limits, 2, [0, 1]) == (pytest.approx(20.0), "a")


def test_each_answer_takes_its_earliest_plan_in_arrival_order() -> None:
    slow = Plan("slow", (PlanCall(("x",), False),))
    fast = Plan("fast", (PlanCall(("y",), False),))
    limits = {"x": Limit(10, 1.0), "y": Limit(1, 5.0)}
    done, taken = best_schedule((slow, fast), limits, [0.0, 0.0, 1.0], [0, 0, 0], gen_s=0.0)
    assert done == pytest.approx([0.0, 0.0, 0.0]) and taken == ["slow", "slow", "slow"]  # ties: the first plan
    done, taken = best_schedule((slow, fast), {"x": Limit(1, 5.0), "y": Limit(1, 5.0)}, [0.0, 0.0, 0.0], [0, 0, 0], 0.0)
    assert taken == ["slow", "fast", "slow"] and done == pytest.approx([0.0, 0.0, 5.0])


def test_the_channel_limit_is_per_channel() -> None:
    limits = slack_limits(post_burst=3)
    assert limits[CHANNEL].per_channel and limits[CHANNEL].rate_per_s == pytest.approx(1.0)
    one = Plan("one message", (PlanCall((CHANNEL,), True),))
    assert schedule(one, limits, [0.0] * 4, [0, 1, 2, 3], GEN) == pytest.approx([GEN] * 4)
    assert schedule(one, limits, [0.0] * 4, [0] * 4, GEN) == pytest.approx([GEN] * 3 + [GEN + 3])


def test_ratio_of_a_figure_to_its_floor() -> None:
    assert ratio(13.0, 6.5) == pytest.approx(2.0)
    assert ratio(None, 6.5) is None and ratio(6.5, None) is None and ratio(1.0, 0.0) is None
    assert math.isinf(ratio(math.inf, 6.5) or 0.0)
