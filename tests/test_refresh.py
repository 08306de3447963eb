"""A Refresh's question keeps bypassing the caches wherever it runs: moved to another process of the fleet too."""

from __future__ import annotations

import dataclasses
import json

from botgateway.fleet.handoff import MovedQuestion
from botgateway.fleet.wire import moved_from_wire, moved_to_wire
from botgateway.messages import InboundMessage
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext


def test_a_refresh_moved_to_another_process_still_bypasses_the_caches() -> None:
    ctx = ToolContext(user_id="U2", platform="slack", conversation_id="slack:T1:C1:1.1", chat_id="C1", is_group=True)
    msg = InboundMessage("slack", "refresh:T1:C1:2.2:U2", "slack:T1:C1:1.1", "which server is 10.0.1.5?",
                         CardTarget("slack", "C1", thread_id="1.1"), dataclasses.replace(ctx, fresh=True))
    moved = MovedQuestion(msg=msg, turn_id="t9", moved_at=1.0, moved_by="replica-a")
    assert moved_from_wire(json.loads(json.dumps(moved_to_wire(moved)))).msg.ctx.fresh is True
    plain = dataclasses.replace(moved, msg=dataclasses.replace(msg, ctx=ctx))
    wire = moved_to_wire(plain)
    del wire["message"]["ctx"]["fresh"]  # as a process of an older release sends it
    assert moved_from_wire(json.loads(json.dumps(wire))).msg.ctx.fresh is False
