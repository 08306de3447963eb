"""What a question typed in this terminal becomes: an :class:`~botgateway.messages.InboundMessage`."""

from __future__ import annotations

from adapters.terminal.sink import PLATFORM
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext

__all__ = ["local_question"]


def local_question(
    text: str, *, conversation_id: str, chat_id: str, user: str, locale: str, tool_platform: str = PLATFORM
) -> InboundMessage:
    """``text`` asked by the local ``user`` in ``chat_id``; tools see ``tool_platform`` (``cli`` for ``ask``)."""
    target = CardTarget(platform=PLATFORM, chat_id=chat_id, user_id=user, user_name=user, locale=locale)
    principal = Principal.of(tool_platform, user, name=user)  # local:<login>, whichever of terminal/cli
    ctx = ToolContext(user_id=user, user_name=user, platform=tool_platform, chat_id=chat_id, principal=principal)
    return InboundMessage(PLATFORM, "", conversation_id, text, target, ctx, principal)
