"""The access policy: it always applies, after any custom hook; a refused asker costs no model request."""

from __future__ import annotations

from collections.abc import Callable

from botgateway.access import Decision, refusal_note, with_decision
from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["AccessPolicy"]


class AccessPolicy:
    """Puts the policy's decision (principal, grant, roles) on an allowed message; refuses the others (audited).

    Args:
        decide: The policy's decision for a message's asker (:meth:`Decisions.for_message`).
    """

    def __init__(self, decide: Callable[[InboundMessage], Decision]) -> None:
        self._decide = decide

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg`` with its decision, or the refusal (``refused:<why>``) its asker is told."""
        decision = self._decide(msg)
        if decision.allowed:
            return with_decision(msg, decision)
        log.info("gateway.refused", platform=msg.platform, principal=decision.principal.id, reason=decision.refusal)
        note = refusal_note(decision, msg.target.locale)
        return Verdict.refusal(t(msg.target.locale, "refused", reason=note), audit=f"refused:{decision.refusal}",
                               reason=note)
