"""Slack-safe model text: no remote images or unsafe links, no broadcast or user pings the asker did not write.

Slack turns ``<!channel>``, ``<!here>``, ``<!everyone>``, ``<!subteam^S…>``
and ``<@U…>`` into notifications wherever it parses text (the ``text`` field,
mrkdwn, the ``markdown`` block, stream chunks). Model output may repeat a tool
result written by anyone, so every such sequence becomes inert text that still
reads the same (``@channel``, with a zero-width space after the ``@``), except
user mentions the asker wrote in the question (:data:`ASKER_MENTIONS`). The
HTML-escaped forms (``&lt;!here&gt;``) are treated alike, since a Markdown
renderer decodes them. Inside code the text keeps its look; only a zero-width
space after the ``<`` stops Slack from parsing it, masked links
(``<http://evil|innocent>``) included. Mentions go first; then the rules every
platform shares (:func:`~botgateway.cards.inert.inert_markup`: images as text,
only http(s) links, each showing its host, masked links and HTML as text),
which leave the mentions alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from botgateway.cards.inert import inert_markup, sub_outside_code
from botgateway.sink import CardTarget

__all__ = ["ASKER_MENTIONS", "allowed_mentions", "mentions_in", "slack_inert"]

ASKER_MENTIONS = "asker_mentions"
"""Key in a card target's ``extra``: the user ids the asker's question mentioned, space-separated.

Those may appear in the answer as real mentions; every other ``<@U…>`` is
defused. Without the key (an older stored target, the adapter not setting it)
no user mention is let through.
"""

_ZWSP = "\u200b"
_LT = r"(?:<|&lt;)"
_GT = r"(?:>|&gt;)"
_SPECIAL = re.compile(
    _LT + r"\s*!\s*(?P<name>channel|here|everyone|group|subteam\^[^|>&\s]*)(?:\|(?P<label>[^>&]*?))?\s*" + _GT, re.IGNORECASE
)
_USER = re.compile(_LT + r"\s*@(?P<id>[UW][A-Z0-9]{2,})(?:\|(?P<label>[^>&]*?))?\s*" + _GT, re.IGNORECASE)
_BARE = re.compile(r"(?<![\w@])@(?P<name>channel|here|everyone)\b", re.IGNORECASE)
_QUESTION_MENTION = re.compile(r"<@([UW][A-Z0-9]{2,})(?:\|[^>]*)?>")
_ANGLE_LINK = re.compile(r"<(?![@!#\s])(?:[A-Za-z][A-Za-z0-9+.-]*:[^<>\n]*|[^<>\n|]*\|[^<>\n]*)>")
"""A ``<url>`` or ``<url|text>`` Slack reads as a link, in code too (``<pod>`` is left alone)."""


def mentions_in(question: str) -> str:
    """The user ids mentioned in a Slack message text, as the :data:`ASKER_MENTIONS` value."""
    return " ".join(dict.fromkeys(_QUESTION_MENTION.findall(question)))


def allowed_mentions(target: CardTarget) -> frozenset[str]:
    """The user ids the answer on ``target`` may mention: those the asker wrote."""
    return frozenset(str(target.extra.get(ASKER_MENTIONS, "") or "").upper().split())


def _in_code(match: re.Match[str]) -> str:
    """The sequence as written, with a zero-width space after its ``<`` so Slack does not parse it."""
    text = match.group()
    opener = "&lt;" if text[:4].lower() == "&lt;" else "<"
    return text[: len(opener)] + _ZWSP + text[len(opener) :]


def _special(match: re.Match[str]) -> str:
    name = match.group("name")
    label = (match.group("label") or "").strip().lstrip("@")
    shown = label or ("group" if name.lower().startswith("subteam") else name.lower())
    return f"@{_ZWSP}{shown}"


def _user(allowed: frozenset[str]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        if match.group("id").upper() in allowed and match.group().startswith("<"):
            return match.group()
        label = (match.group("label") or "").strip().lstrip("@")
        return f"@{_ZWSP}{label or match.group('id')}"

    return replace


def _user_in_code(allowed: frozenset[str]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        if match.group("id").upper() in allowed and match.group().startswith("<"):
            return match.group()
        return _in_code(match)

    return replace


def slack_inert(text: str, locale: str, allowed: frozenset[str] = frozenset()) -> str:
    """``text`` safe to send to Slack: broadcasts and unasked user mentions defused, then images as text and links
    by the shared rule; a ``<…>`` link inside code is kept from being parsed."""
    if "@" in text or "!" in text:
        text = sub_outside_code(_SPECIAL, text, _special, _in_code)
        text = sub_outside_code(_USER, text, _user(allowed), _user_in_code(allowed))
        text = sub_outside_code(_BARE, text, lambda m: f"@{_ZWSP}{m.group('name')}")
    text = inert_markup(text, locale)
    return sub_outside_code(_ANGLE_LINK, text, lambda m: m.group(), _in_code) if "<" in text else text
