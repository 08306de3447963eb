"""The access hook: a deployment's own rule, asked before the configured policy, may refuse a message (audited)."""

from __future__ import annotations

from botgateway.access import AccessHook
from botgateway.messages import InboundMessage
from botgateway.strings import t
from botgateway.turns.checks.base import Verdict
from botgateway.turns.checks.base import admission_log as log

__all__ = ["AccessHookCheck"]


class AccessHookCheck:
    """Refuses a message its ``hook`` refuses, or any message when the hook fails."""

    def __init__(self, hook: AccessHook) -> None:
        self._hook = hook

    async def __call__(self, msg: InboundMessage, turn_id: str) -> InboundMessage | Verdict:
        """``msg``, unless the hook refused it (its asker is told why; the audit keeps the hook's reason)."""
        try:
            refusal = await self._hook(msg)
        except Exception as exc:
            log.error("gateway.access_hook_failed", error=type(exc).__name__)
            refusal = "the access check failed; please try again later"
        if refusal is None:
            return msg
        log.info("gateway.refused", platform=msg.platform, user=msg.ctx.user_id, reason=refusal)
        return Verdict.refusal(t(msg.target.locale, "refused", reason=refusal), audit="refused", reason=refusal)
