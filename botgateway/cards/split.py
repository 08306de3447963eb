"""Cutting long text at clean points: paragraph, line, sentence, word; never inside a code fence when avoidable.

A long answer continues in a new card (part 2, 3…) and a long fallback goes out
as several messages; both cut here, and the cut never drops or adds a character.
"""

from __future__ import annotations

import re

__all__ = ["FENCE", "split_parts", "split_point"]

FENCE = re.compile(r"^[ \t]*```", re.MULTILINE)
"""The start of a fenced code block line."""
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；：])")
_SPACE = re.compile(r"\s+")


def _fence_open_at(text: str, pos: int) -> bool:
    """True when ``pos`` lies inside a fenced code block of ``text``."""
    return len(FENCE.findall(text, 0, pos)) % 2 == 1


def split_point(text: str, max_chars: int) -> int:
    """Where to cut ``text`` so the first part has at most ``max_chars`` characters.

    Preference: a paragraph break, a line break, a sentence end, a space, all
    outside code fences and in the second half of the window; then the same
    inside a fence; a hard cut only when the window has no break at all (a
    60 kB token). Returns ``len(text)`` when everything fits.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    if len(text) <= max_chars:
        return len(text)
    window = text[: max_chars + 1]
    floor = max_chars // 2
    candidates: list[list[int]] = [[], [], [], []]
    for match in re.finditer(r"\n\s*\n", window):
        candidates[0].append(match.end())
    for match in re.finditer(r"\n", window):
        candidates[1].append(match.end())
    for match in _SENTENCE_END.finditer(window):
        candidates[2].append(match.end())
    for match in _SPACE.finditer(window):
        candidates[3].append(match.end())
    for need_outside_fence in (True, False):
        for group in candidates:
            for cut in sorted(group, reverse=True):
                if cut > max_chars or cut < floor or cut <= 0:
                    continue
                if need_outside_fence and _fence_open_at(text, cut):
                    continue
                return cut
    # No break in the second half: take any break at all before a hard cut.
    for group in candidates:
        usable = [c for c in group if 0 < c <= max_chars]
        if usable:
            return max(usable)
    return max_chars


def split_parts(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` into parts of at most ``max_chars`` characters at clean points.

    ``"".join(split_parts(text, n)) == text`` always: nothing is dropped or
    added, whitespace included.
    """
    parts: list[str] = []
    rest = text
    while len(rest) > max_chars:
        cut = split_point(rest, max_chars)
        parts.append(rest[:cut])
        rest = rest[cut:]
    if rest or not parts:
        parts.append(rest)
    return parts
