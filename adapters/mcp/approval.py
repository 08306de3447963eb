"""Calls that need an approver: refused at the MCP door, with a message that says where to ask instead.

In chat, a call that needs an approval waits on the card for an approver's
Approve or Deny (:mod:`botgateway.approvals`). The door refuses such a call at
once instead of waiting, because nobody could decide it:

- an MCP client has no approval card and no chat thread; nothing would tell an
  approver that a call waits, so it would only hang until
  ``access.approvals.timeout_s`` (minutes) and then be denied;
- MCP's own way to ask for input, elicitation, asks the *caller* — the person
  or agent who made the call — which is no approval by someone else (and
  ``four_eyes`` forbids exactly that);
- holding an HTTP request open for minutes breaks on proxies and client
  time-outs, and the IDE agent's user sees a stalled tool.

Refusing is honest and immediate: the tool is still listed (marked, so the
client's model knows before it tries), and its refusal names the chat, where an
approver can decide. Every refusal is audited like any other call.
"""

from __future__ import annotations

__all__ = ["APPROVAL_MARK", "approval_refusal"]

APPROVAL_MARK = "[Needs an approver: refused through MCP; ask for it in chat.] "
"""What a listed tool's description starts with when its calls need an approval."""


def approval_refusal(tool: str) -> str:
    """Why a call of ``tool`` is refused at the door, and where it can be made instead."""
    return (f"not run: every call of {tool!r} needs an approver's decision, and an MCP client has no way to ask one. "
            "Ask for it in chat (Slack, DingTalk or the web console), where an approver can approve the call.")
