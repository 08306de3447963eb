"""Links in model text made safe to draw: only http(s) is clickable, and no link hides where it goes.

What the model writes can repeat a tool result, and a tool result (an
inventory record, an MCP answer, an alert's annotation) can be written by
anyone. A planted ``[click](javascript:…)``, a Slack-style masked link
``<http://evil|the runbook>`` or raw HTML (``<a href=…>``, ``<script>``; some
card renderers honour HTML) would put a trap in an ops chat. The rule, the
same on every platform:

- A Markdown link survives only with an ``http`` or ``https`` address, written
  out again in a plain form (no credentials, nothing a renderer could decode
  into something else). Any other scheme (``javascript:``, ``data:``,
  ``vbscript:``, however cased, spaced or entity-encoded), a relative address
  or one that cannot be read loses its link: its text stays.
- A kept link whose text does not show its host gets the host beside it:
  ``[the runbook (evil.example)](https://evil.example/x)``. Look-alike text
  (``[https://good.example](https://evil.example)``) and non-ASCII hosts
  (spelled out in punycode) are treated alike.
- A masked link ``<url|text>`` becomes ``text (host)`` as plain text, an HTML
  tag (or comment, declaration, processing instruction) gets a zero-width
  space after its ``<`` so no renderer reads it as one, and an autolink
  ``<url>`` stays only when its address is http(s) and already in plain form.
- Reference definitions (``[r]: url``) are broken, so ``[text][r]`` never
  links: a definition can come after its use, which a stream cannot take back.
- Whatever still reads ``](`` outside the links written here gets a
  zero-width space between, so text this module did not read as a link
  cannot become one elsewhere either.

Code spans and blocks are left as written (:mod:`botgateway.cards.code_spans`),
and the rewrites never add, drop or move a backtick, so what is code stays
code. Slack's mentions (``<@U…>``, ``<!here>``, ``<#C…>``) are the platform's
to handle: its rules run first. :func:`open_link_start` tells a growing
stream where a link begins that is not complete yet.
"""

from __future__ import annotations

import html
import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from botgateway.cards.code_spans import code_ranges, inside, sub_outside_code

__all__ = ["SafeUrl", "inert_links", "open_link_start", "reveals_host", "safe_url", "with_host"]

ZWSP: Final = "\u200b"

_MAX_DEPTH = 4
"""Links nested in link text are read this deep; deeper, their text is left as text (no link is drawn)."""

# --- addresses -----------------------------------------------------------------------------------------------------

_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_ENTITY_SHAPED = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
_C0_AND_SPACE = "".join(map(chr, range(33)))
_HTTP = re.compile(r"https?://", re.IGNORECASE)
_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_URL_SAFE = "/?%:@!$&*+,;=~-._"
"""Kept as written in a path, query or fragment; anything else (spaces, quotes, brackets, backticks) is %-encoded."""


@dataclass(frozen=True)
class SafeUrl:
    """An http(s) address as a link may carry it."""

    href: str
    """The address written out: scheme and host lower-case, no credentials, no space, quote, bracket, backslash or
    entity-shaped ``&`` left for a renderer to read differently."""
    host: str
    """The host a reader is shown: lower-case, punycode (``xn--…``) for a non-ASCII name, ``[…]`` for IPv6."""


def safe_url(destination: str) -> SafeUrl | None:
    """``destination`` (as a Markdown link, an autolink or a masked link writes it) when it is http(s), else None.

    It is read the way a browser would end up reading it: backslash escapes
    and character references decoded (repeatedly), tabs and newlines dropped,
    a backslash taken for a slash.
    """
    url = destination.strip()
    if url.startswith("<") and url.endswith(">"):
        url = url[1:-1]
    url = _ESCAPED.sub(r"\1", url)
    for _ in range(4):
        decoded = _ENTITY.sub(lambda m: html.unescape(m.group()), url)
        if decoded == url:
            break
        url = decoded
    url = _TAB_OR_NEWLINE.sub("", url).strip(_C0_AND_SPACE).replace("\\", "/")
    if not _HTTP.match(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
        host = shown_host(unquote(parts.hostname or ""))
    except ValueError:
        return None
    if host is None:
        return None
    netloc = host + (f":{port}" if port is not None else "")
    path, query, fragment = (quote(part, safe=_URL_SAFE) for part in (parts.path, parts.query, parts.fragment))
    href = urlunsplit((parts.scheme.lower(), netloc, path, query, fragment))
    return SafeUrl(href=_ENTITY_SHAPED.sub("%26", href), host=host)


def shown_host(host: str) -> str | None:
    """``host`` as a reader is shown it (see :attr:`SafeUrl.host`), or None when it is not a host name."""
    host = host.strip().lower().rstrip(".")
    if ":" in host:
        try:
            return f"[{ipaddress.IPv6Address(host.strip('[]')).compressed}]"
        except ValueError:
            return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return host if _HOST_NAME.fullmatch(host) else None


# --- does a text show its host ----------------------------------------------------------------------------------

_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s<>()\[\]`*|\"']+")
_HOST_IN_TEXT = re.compile(
    r"(?<![\w.@-])(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,63}(?![\w-])"
    r"|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])"
)


def reveals_host(text: str, host: str) -> bool:
    """Whether a link's ``text`` tells the reader it goes to ``host``: it ends with ``(host)``, or every address
    and host name in it is ``host``, written in ASCII (a non-ASCII name may be a look-alike: it never counts)."""
    if text.rstrip().endswith(f"({host})"):
        return True
    named: list[str | None] = []
    for match in _URL_IN_TEXT.finditer(text):
        url = safe_url(match.group()) if match.group().isascii() else None
        named.append(url.host if url is not None else None)
    for name in _HOST_IN_TEXT.findall(_URL_IN_TEXT.sub(" ", text)):
        named.append(shown_host(name) if name.isascii() else None)
    return bool(named) and all(name == host for name in named)


def with_host(text: str, host: str) -> str:
    """``text`` with ``(host)`` beside it, unless it already shows ``host``."""
    if reveals_host(text, host):
        return text
    text = text.rstrip()
    return f"{text} ({host})" if text else f"({host})"


# --- <…>: masked links, autolinks, HTML --------------------------------------------------------------------------

_ANGLE = re.compile(
    r"<(?P<masked>[^\s<>|@!#\u200b][^\s<>|]*)\|(?P<label>[^<>\n]*)>"
    r"|<(?P<auto>[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>"
    r"|(?P<open><|(?i:&lt;|&#0*60;|&#x0*3c;))(?=/?[A-Za-z]|[!?])"
)
"""A Slack masked link, an autolink, or the ``<`` (raw or as a character reference) of a tag, comment,
declaration or processing instruction."""


_LITERAL = re.compile(r"\]\(|" + _ANGLE.pattern)
"""What :func:`_literal` rewrites: a ``](`` no link owns, and what :data:`_ANGLE` reads."""


def _angle(match: re.Match[str]) -> str:
    whole = match.group()
    if match.group("masked") is not None and "`" not in whole:
        url = safe_url(match.group("masked"))
        label = " ".join(match.group("label").split())
        return with_host(label, url.host) if url is not None else label
    if match.group("auto") is not None:
        url = safe_url(match.group("auto"))
        if url is not None and url.href == match.group("auto"):
            return whole
    opener = match.group("open") or "<"
    return opener + ZWSP + whole[len(opener):]


# --- [text](url) ----------------------------------------------------------------------------------------------------

_BRACKETS = re.compile(r"\\.|[\[\]]|\n[ \t]*\n", re.DOTALL)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SPACE = re.compile(r"[ \t]*(?:\n[ \t]*)?")
_ANGLE_END = re.compile(r"[\n<>]")
_TITLE_NEVER_ENDS = re.compile(r"\n[ \t]*\n|`")
"""After an open title: a blank line (it cannot close) or a backtick (a code span comes first)."""
_DESTINATION = re.compile(
    r"<(?:[^<>\n\\]|\\[!-~])*>"
    r"|(?:[^\s()\\\x00-\x1f\x7f]|\\[!-~]|\((?:[^\s()\\\x00-\x1f\x7f]|\\[!-~])*\))+"
)
_DESTINATION_GOES_ON = re.compile(r"(?:\((?:[^\s()\\\x00-\x1f\x7f]|\\[!-~])*)?\\?")
"""The rest of the text after a destination, when it is only more of it: an open ``(`` or an escape's backslash."""
_TITLE = {
    '"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL),
    "'": re.compile(r"'(?:[^'\\]|\\.)*'", re.DOTALL),
    "(": re.compile(r"\((?:[^()\\]|\\.)*\)", re.DOTALL),
}
_INCOMPLETE: Final = "incomplete"
"""A parse that ran into the end of the text: more text decides."""


@dataclass(frozen=True)
class _Link:
    start: int
    close: int
    """Where the ``]`` after its text is."""
    destination: str
    end: int


def _pairs(text: str, code: list[tuple[int, int]]) -> tuple[dict[int, int], list[int]]:
    """Each ``[`` outside code with its ``]`` (brackets nest, escapes count, a blank line ends them all), and the
    ``[`` still open at the end."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACKETS.finditer(text):
        mark = token.group()
        if mark[0] == "\\" or (code and inside(code, token.start())):
            continue
        if mark == "[":
            stack.append(token.start())
        elif mark == "]":
            if stack:
                pairs[stack.pop()] = token.start()
        else:
            stack.clear()
    return pairs, stack


def _after_text(text: str, start: int, close: int) -> _Link | str | None:
    """The link whose text ends at ``close``: its ``(destination "title")``, None when there is none, or
    :data:`_INCOMPLETE`. A backtick in it means a code span comes first (CommonMark): no link."""
    n = len(text)
    i = close + 1
    if i >= n:
        return _INCOMPLETE
    if text[i] != "(":
        return None
    i = _space_end(text, i + 1)
    destination = ""
    if i < n and text[i] != ")":
        found = _DESTINATION.match(text, i)
        if found is None:  # only a ``<…`` not closed yet can still become a destination
            return _INCOMPLETE if text[i] == "<" and not _ANGLE_END.search(text, i + 1) else None
        destination, i = found.group(), found.end()
        if _DESTINATION_GOES_ON.fullmatch(text, i):
            return _INCOMPLETE
        j = _space_end(text, i)
        if i < j < n and text[j] in _TITLE:
            title = _TITLE[text[j]].match(text, j)
            if title is None:
                return None if _TITLE_NEVER_ENDS.search(text, j) else _INCOMPLETE
            j = _space_end(text, title.end())
        i = j
    if "`" in text[close:i]:
        return None
    if i >= n:
        return _INCOMPLETE
    return _Link(start, close, destination, i + 1) if text[i] == ")" else None


def _space_end(text: str, position: int) -> int:
    """Past the spaces and tabs at ``position``, and one line break among them."""
    match = _SPACE.match(text, position)
    return match.end() if match else position


def _links(text: str, depth: int) -> str:
    """``text`` with every inline link rewritten by the rule, and what lies between them by :func:`_literal`."""
    code = code_ranges(text) if "`" in text or "~~~" in text else []
    pairs, _ = _pairs(text, code) if "]" in text and depth <= _MAX_DEPTH else ({}, [])
    out: list[str] = []
    literal = 0
    for start in sorted(pairs):
        if start < literal:
            continue
        link = _after_text(text, start, pairs[start])
        if not isinstance(link, _Link):
            continue
        out.append(_literal(text, literal, start, code))
        out.append(_link(text, link, depth))
        literal = link.end
    out.append(_literal(text, literal, len(text), code))
    return "".join(out)


def _literal(text: str, start: int, end: int, code: list[tuple[int, int]]) -> str:
    """``text[start:end]``, no link: outside code, a ``](`` gets a zero-width space between, and ``<…>`` is
    rewritten by :func:`_angle` (read within these bounds only: a masked link cannot span a link)."""
    out: list[str] = []
    last = start
    for found in _LITERAL.finditer(text, start, end):
        if code and inside(code, found.start()):
            continue
        out.append(text[last : found.start()])
        out.append("]" + ZWSP + "(" if found.group() == "](" else _angle(found))
        last = found.end()
    out.append(text[last:end])
    return "".join(out)


def _link(text: str, link: _Link, depth: int) -> str:
    label = _links(text[link.start + 1 : link.close], depth + 1)
    url = safe_url(link.destination)
    if url is None:
        return label
    return f"[{with_host(label, url.host)}]({url.href})"


# --- [label]: url ---------------------------------------------------------------------------------------------------

_DEFINITION = re.compile(r"^(?:[ \t>]|[-*+][ \t]|\d{1,9}[.)][ \t])*\[(?:[^\[\]\\]|\\.)+\](?=:)", re.MULTILINE)
"""A reference definition's label (at a line's start, maybe inside quotes or list items), before its colon."""


def inert_links(text: str) -> str:
    """``text`` with its links, masked links and HTML made safe by the rule (see the module's docstring)."""
    if not any(mark in text for mark in "]<&"):
        return text
    text = _links(text, 0)
    return sub_outside_code(_DEFINITION, text, lambda m: m.group() + ZWSP) if "]:" in text else text


def open_link_start(text: str) -> int | None:
    """Where a link begins that the next characters could still complete or undo (in the last paragraph), or
    None: a stream holds it back until it is decided."""
    if "[" not in text:
        return None
    code = code_ranges(text) if "`" in text or "~~~" in text else []
    pairs, still_open = _pairs(text, code)
    starts = list(still_open)
    last_paragraph = max((blank.end() for blank in _BLANK_LINE.finditer(text)), default=0)
    for start, close in pairs.items():
        if close >= last_paragraph and _after_text(text, start, close) == _INCOMPLETE:
            starts.append(start)
    return min(starts, default=None)
