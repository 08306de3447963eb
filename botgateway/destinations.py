"""Where a card the bot posts unprompted goes: ``slack:<channel id>`` or ``dingtalk:<openConversationId>``.

Alert routes and scheduled reports name their destinations this way in the
config; nothing here knows how to reach them (the adapters do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

__all__ = ["Destination", "DestinationPlatform", "parse_destination"]

DestinationPlatform: TypeAlias = Literal["slack", "dingtalk"]
"""The platforms a card can be posted to without a question to answer."""

_PLATFORMS: tuple[str, ...] = get_args(DestinationPlatform)

_SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{1,30}")
"""A Slack conversation id: public (C…), private (G…) or direct (D…) channel; names (#ops) cannot be posted to."""
_DINGTALK_CHAT = re.compile(r"[A-Za-z0-9+/=_$.-]{1,200}")
"""A DingTalk openConversationId (``cid…``, base64-like)."""

_USAGE = "use slack:<channel id> or dingtalk:<openConversationId>"


@dataclass(frozen=True)
class Destination:
    """One chat a card goes to."""

    platform: DestinationPlatform
    """The adapter that posts it."""
    chat_id: str
    """The platform's id of the chat: a Slack channel id (``C0OPS``) or a DingTalk ``openConversationId``."""

    def __str__(self) -> str:
        return f"{self.platform}:{self.chat_id}"


def parse_destination(text: str) -> Destination:
    """``"slack:C0OPS"`` → ``Destination("slack", "C0OPS")``; a :class:`ValueError` says plainly what is wrong."""
    platform, sep, chat_id = text.strip().partition(":")
    if not sep or not chat_id:
        raise ValueError(f"{_shown(text)} is not a destination: {_USAGE}")
    if platform not in _PLATFORMS:
        raise ValueError(f"{_shown(text)}: unknown platform {_shown(platform)}; {_USAGE}")
    if platform == "slack" and not _SLACK_CHANNEL.fullmatch(chat_id):
        raise ValueError(
            f"{_shown(text)}: a Slack destination is a channel id such as C0123ABCD (the channel's details show it), "
            "not its name; " + _USAGE
        )
    if platform == "dingtalk" and not _DINGTALK_CHAT.fullmatch(chat_id):
        raise ValueError(f"{_shown(text)}: a DingTalk destination is a group's openConversationId (cid…); " + _USAGE)
    return Destination(platform=platform, chat_id=chat_id)  # type: ignore[arg-type]  # checked against _PLATFORMS


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short: it comes from a config file or a command line."""
    return repr(text if len(text) <= 80 else text[:79] + "…")
