"""Turns: admission's checks, scheduling in each conversation's line, fair slots, running a turn into its card, stops, drains and notes."""

from __future__ import annotations

from botgateway.turns.admission import Admission, Admitted
from botgateway.turns.control import TurnControl
from botgateway.turns.drain import Drain
from botgateway.turns.fair_slots import FairSlots, fair_share
from botgateway.turns.queues import ConversationQueues
from botgateway.turns.replies import Replies
from botgateway.turns.scheduler import TurnScheduler

__all__ = [
    "Admission",
    "Admitted",
    "ConversationQueues",
    "Drain",
    "FairSlots",
    "Replies",
    "TurnControl",
    "TurnScheduler",
    "fair_share",
]
