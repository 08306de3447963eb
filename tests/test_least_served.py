"""Who goes next among waiting owners: the least served first, in turn among equals."""

from __future__ import annotations

from botgateway.budget import LeastServed


def test_the_least_served_goes_first_and_equals_take_turns() -> None:
    order = LeastServed()
    assert order.first() is None
    order.put("chatty", 3)
    order.put("a", 1)
    order.put("b", 1)
    assert order.first() == "a"
    order.put("a", 2)  # served once more: behind b now
    assert order.first() == "b"
    order.put("quiet", 0)  # a card that shows nothing yet
    assert order.first() == "quiet"
    order.drop("quiet")
    order.drop("b")
    assert order.first() == "a" and len(order) == 2 and "b" not in order
    order.drop("missing")  # not waiting: nothing to do
    order.drop("a")
    order.drop("chatty")
    assert order.first() is None and len(order) == 0
