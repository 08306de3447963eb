"""From a Slack event to what the gateway gets: who sent it, which workspace, the text, the card's target.

Pure functions of the event and the bot's identity; the adapter
(:mod:`adapters.slack.adapter`) decides what to do with the result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.slack.inert import ASKER_MENTIONS, mentions_in
from botgateway.messages import InboundMessage, conversation_key
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import ToolContext

if TYPE_CHECKING:
    from botgateway.config import SlackConfig

__all__ = [
    "HANDLED_SUBTYPES",
    "event_team",
    "inbound_message",
    "is_from_bot",
    "mentioned_users",
    "slack_principal",
    "strip_mention",
    "suggested_prompts",
]

HANDLED_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
"""Message subtypes that carry a person's new message; every other subtype (edits, deletions, joins, bot posts) is ignored."""

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")

_MAX_SUGGESTED_PROMPTS = 4
"""Slack shows at most four suggested prompts."""


def is_from_bot(event: Mapping[str, Any], *, bot_user_id: str, bot_id: str, ignore_bots: bool) -> bool:
    """Our own messages always; other bots' unless ``ignore_bots`` is off."""
    own = (bot_user_id and event.get("user") == bot_user_id) or (bot_id and event.get("bot_id") == bot_id)
    if own:
        return True
    other_bot = bool(event.get("bot_id")) or event.get("subtype") == "bot_message" or bool(event.get("bot_profile"))
    return other_bot and ignore_bots


def event_team(body: Mapping[str, Any], event: Mapping[str, Any], *, installed_team: str) -> str:
    """The workspace the app is installed in (rate limits, conversation keys).

    In a shared channel ``event.team`` is the sender's own workspace, which must not split a thread.
    """
    return str(body.get("team_id") or installed_team or event.get("team") or "")


def mentioned_users(text: str) -> set[str]:
    """User ids mentioned in a message's text."""
    return set(_MENTION.findall(text))


def strip_mention(text: str, bot_user_id: str) -> str:
    """``text`` without the bot's mention and with runs of blanks collapsed."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", " ", text)
    return re.sub(r"[ \t]+", " ", text).strip()


def suggested_prompts(config: SlackConfig) -> list[dict[str, str]]:
    """The configured prompts the assistant pane suggests when a thread opens, as Slack takes them."""
    return [
        {"title": str(p["title"])[:75], "message": str(p["message"])}
        for p in config.suggested_prompts
        if isinstance(p, Mapping) and p.get("title") and p.get("message")
    ][:_MAX_SUGGESTED_PROMPTS]


def inbound_message(
    event: Mapping[str, Any],
    *,
    team: str,
    thread_ts: str | None,
    direct: bool,
    text: str,
    user_name: str,
    config: SlackConfig,
) -> InboundMessage:
    """The gateway's message for one person's Slack message, with the target its card answers in."""
    channel = str(event.get("channel") or "")
    ts = str(event.get("ts") or "")
    user = str(event.get("user") or "")
    user_team = _sender_team(event)
    conversation = conversation_key("slack", config.session_scope, workspace=team, chat=channel,
                                    thread=thread_ts, user=user)
    target = CardTarget(
        platform="slack",
        chat_id=channel,
        thread_id=thread_ts,
        user_id=user,
        user_name=user_name,
        is_group=not direct,
        locale=config.locale,
        workspace_id=team,
        # The people the asker named may be named back in the answer; any other mention is defused.
        extra={"ts": ts, "user_team": user_team, ASKER_MENTIONS: mentions_in(str(event.get("text") or ""))},
    )
    principal = slack_principal(event, team=team, user_name=user_name)
    ctx = ToolContext(user_id=user, user_name=user_name, platform="slack", conversation_id=conversation,
                      chat_id=channel, is_group=not direct, principal=principal)
    return InboundMessage(platform="slack", message_id=f"{team}:{channel}:{ts}", conversation_id=conversation,
                          text=text, target=target, ctx=ctx, principal=principal)


def _sender_team(event: Mapping[str, Any]) -> str:
    """The workspace the sender of ``event`` belongs to (``user_team``, else ``team``); empty when it says neither."""
    return str(event.get("user_team") or event.get("team") or "")


def slack_principal(event: Mapping[str, Any], *, team: str, user_name: str = "") -> Principal:
    """The asker of ``event`` as ``slack:U…``; external when their own team is not ``team`` (the installing one).

    In a Slack Connect channel the event carries the asker's home workspace as
    ``user_team``; it differs from the workspace the bot is installed in. Fail
    closed: when the event names no workspace of the sender's (or the installing
    one is not known), nothing shows the sender is one of ours, so they are external.
    """
    user_team = _sender_team(event)
    external = not team or not user_team or user_team != team
    return Principal.of("slack", str(event.get("user") or ""), team=user_team, external=external, name=user_name)
