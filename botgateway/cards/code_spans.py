"""Where Markdown text is code: the ranges a rewrite of model text leaves as written.

Code is not drawn as markup (a link or an image inside it is text), so the
rules that make model text inert leave it alone, and an ops answer's
``kubectl logs <pod>`` keeps its look. Reading too much as code would let
markup through unrewritten, so when a platform could read a construct either
way this reads it as prose: a code span never crosses a blank line, a
backtick fence's info string has no backtick, and an indented fence (which a
list item may have opened) ends at the first line indented less than it,
where the item would. :func:`open_code_start` tells a growing stream where a
code span that the next characters could still close begins.
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections.abc import Callable

__all__ = ["code_ranges", "inside", "open_code_start", "sub_outside_code"]

_FENCE_LINE = re.compile(r"^(?P<indent> {0,3})(?P<marker>`{3,}(?=[^`\n]*$)|~{3,})", re.MULTILINE)
_BACKTICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_LINE = re.compile(r"^.*$", re.MULTILINE)


def code_ranges(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every code block and code span in ``text``, in order; an unclosed fence runs to the end
    (or, indented, to its first line indented less than itself)."""
    ranges: list[tuple[int, int]] = []
    position = 0
    while position < len(text):
        fence = _FENCE_LINE.search(text, position)
        limit = fence.start() if fence else len(text)
        ranges.extend(_inline_code(text, position, limit))
        if fence is None:
            break
        end = _fence_end(text, fence)
        ranges.append((fence.start(), end))
        position = end
    return ranges


def _fence_end(text: str, fence: re.Match[str]) -> int:
    """Where the block that ``fence`` opens ends: after its closing fence, or before a line that leaves it."""
    marker, indent = fence.group("marker"), len(fence.group("indent"))
    closing = re.compile(r" {0,3}" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}[ \t]*")
    line_end = text.find("\n", fence.end())
    if line_end == -1:
        return len(text)
    for line in _LINE.finditer(text, line_end + 1):
        body = line.group()
        if closing.fullmatch(body):
            return line.end()
        if indent and body.strip() and len(body) - len(body.lstrip(" ")) < indent:
            return line.start()  # a list item that held the fence ended here: so did the fence
    return len(text)


def _inline_code(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Code spans between ``start`` and ``end``, paragraph by paragraph: a backtick run closed by the next run of
    the same length in its paragraph. A backslash before a run makes its first backtick literal (no escape works
    inside a span, so a closing run is taken as it is)."""
    spans: list[tuple[int, int]] = []
    for paragraph_start, paragraph_end in _paragraphs(text, start, end):
        runs = [(run.start(), run.end()) for run in _BACKTICKS.finditer(text, paragraph_start, paragraph_end)]
        i = 0
        while i < len(runs):
            opening, run_end = runs[i]
            opening += _escaped(text, opening)
            length = run_end - opening
            closing = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == length), None)
            if not length or closing is None:
                i += 1  # an unmatched run is literal text (CommonMark)
                continue
            spans.append((opening, runs[closing][1]))
            i = closing + 1
    return spans


def _escaped(text: str, position: int) -> bool:
    """Whether the character at ``position`` follows an odd number of backslashes."""
    backslashes = 0
    while position - backslashes > 0 and text[position - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _paragraphs(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut at blank lines: no inline construct crosses one."""
    pieces: list[tuple[int, int]] = []
    for blank in _BLANK_LINE.finditer(text, start, end):
        pieces.append((start, blank.start()))
        start = blank.end()
    pieces.append((start, end))
    return pieces


def open_code_start(text: str) -> int | None:
    """Where a code span begins that more text could still close (an unmatched backtick run in the last
    paragraph after the last fence), or None: what lies after it may yet turn into code."""
    if "`" not in text:
        return None
    ranges = code_ranges(text)
    start = max((blank.end() for blank in _BLANK_LINE.finditer(text)), default=0)
    start = max(start, max((end for begin, end in ranges if _FENCE_LINE.match(text, begin)), default=0))
    for run in _BACKTICKS.finditer(text, start):
        opening = run.start() + _escaped(text, run.start())
        if opening < run.end() and not inside(ranges, opening):
            return opening
    return None


def inside(ranges: list[tuple[int, int]], position: int) -> bool:
    """Whether ``position`` lies in one of ``ranges`` (as :func:`code_ranges` gives them, in order)."""
    index = bisect_right(ranges, (position, sys.maxsize)) - 1
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
        if ranges and inside(ranges, match.start()):
            return code(match) if code is not None else match.group(0)
        return prose(match)

    return pattern.sub(replace, text)
