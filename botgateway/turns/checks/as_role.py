"""A role for a turn nobody typed: an alert's investigation or a scheduled report runs as the role its configuration
names, under the policy and the channel's guardrail like anyone (refusals audited)."""

from __future__ import annotations

from collections.abc import Callable

from botgateway.access import Decision, refusal_note, with_decision
from botgateway.messages import InboundMessage
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["AsRole"]


class AsRole:
    """Puts the decision for ``role`` over ``tools`` (all when ``None``) on the message, or refuses it.

    Args:
        decide: The policy's decision for a message's principal holding a role, over some tools
            (:meth:`Decisions.as_role`).
        role: The role the turn runs as.
        tools: The only tools it may be offered (an investigation's read-only tools); ``None``: what the role allows.
    """

    def __init__(
        self, decide: Callable[[InboundMessage, str, frozenset[str] | None], Decision], role: str,
        tools: frozenset[str] | None,
    ) -> None:
        self._decide = decide
        self._role = role
        self._tools = tools

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg`` with its decision, or the refusal (``refused:<why>``)."""
        decision = self._decide(msg, self._role, self._tools)
        if decision.allowed:
            return with_decision(msg, decision)
        note = refusal_note(decision, msg.target.locale)
        log.warning("gateway.unprompted_refused", principal=msg.asker.id, role=self._role, reason=decision.refusal)
        return Verdict.refusal(note, audit=f"refused:{decision.refusal}")
