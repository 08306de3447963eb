"""Token estimates: roughly right, deterministic and cheap.

Exact counts need the provider's tokenizer; the history budget only has to be
roughly right. Real tokenizers give about one token per common
Chinese/Japanese/Korean character and about four characters per token for
English, code, JSON and IPs; mixed text is estimated part by part.

:func:`fit_to_tokens` cuts a list of messages down to a budget without
changing its shape, so a request stays within what the model accepts however
long one message was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "CUT_MARKER",
    "MESSAGE_OVERHEAD_TOKENS",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "content_text",
    "estimate_message_tokens",
    "estimate_text_tokens",
    "estimate_tokens",
    "fit_to_tokens",
    "truncate_to_tokens",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Per-message framing (role, separators) that chat templates add."""
TOOL_CALL_OVERHEAD_TOKENS = 6
"""Per-tool-call framing (id, type, name keys) on top of the name and arguments."""
CHARS_PER_TOKEN = 4
"""Non-CJK text: about four characters per token for English, code, JSON and IPs."""
CUT_MARKER = "\n[… {n} characters left out here to fit the model's context]"
"""Ends a message :func:`fit_to_tokens` cut, so the model knows it sees only the beginning."""

_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x303F),  # CJK punctuation
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x31FF),  # Bopomofo, Hangul compatibility, Katakana ext.
    (0x3400, 0x4DBF),  # CJK ext. A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # full-width forms (，。！？)
    (0x20000, 0x3FFFF),  # CJK ext. B and later
)


# One character class: history() estimates every stored character on each turn, so a
# per-character Python loop would block the event loop for tens of milliseconds.
_CJK = re.compile("[" + "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in _CJK_RANGES) + "]")


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text``: one per CJK character, one per four other characters (rounded up).

    Deterministic and cheap. Real tokenizers give about one token per common
    Chinese/Japanese/Korean character and about four characters per token for
    English; mixed text is estimated part by part.
    """
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / CHARS_PER_TOKEN)


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}, …]
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def estimate_message_tokens(message: Mapping[str, Any]) -> int:
    """Tokens of one OpenAI message: its text, its tool calls and a fixed overhead."""
    tokens = MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens(content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        tokens += TOOL_CALL_OVERHEAD_TOKENS
        tokens += estimate_text_tokens(str(function.get("name", "")))
        tokens += estimate_text_tokens(str(function.get("arguments", "")))
    return tokens


def estimate_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a list of messages (see :func:`estimate_text_tokens`)."""
    return sum(estimate_message_tokens(message) for message in messages)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut (at a line or word end when possible) so its estimate is at most ``max_tokens``."""
    if estimate_text_tokens(text) <= max_tokens:
        return text
    return _prefix_within(text, max_tokens - 1) + " …"


def _prefix_within(text: str, max_tokens: int) -> str:
    """The longest beginning of ``text`` within ``max_tokens``, ended at a line or word end when one is near."""
    low, high = 0, len(text)
    while low < high:  # longest prefix within the budget
        middle = (low + high + 1) // 2
        if estimate_text_tokens(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    cut = text[:low]
    for stop in ("\n", " "):
        at = cut.rfind(stop)
        if at > low * 0.7:
            cut = cut[:at]
            break
    return cut.rstrip()


def fit_to_tokens(messages: Sequence[Mapping[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """``messages`` with their longest texts cut so the estimate is at most ``max_tokens``.

    The shape never changes: every message, role, tool call and id stays, so a
    tool result still follows its call. Only string ``content`` is cut, each to
    one common length (shorter texts stay whole), keeping its beginning and
    ending with :data:`CUT_MARKER`. Best effort when even the framing is over.
    """
    out = [dict(message) for message in messages]
    total = estimate_tokens(out)
    if total <= max_tokens:
        return out
    sizes = [estimate_text_tokens(m["content"]) if isinstance(m.get("content"), str) else 0 for m in out]
    cap = _common_cap(sizes, max_tokens - (total - sum(sizes)))
    for message, size in zip(out, sizes, strict=True):
        if size > cap:
            message["content"] = _cut(message["content"], cap, size)
    return out


def _common_cap(sizes: Sequence[int], room: int) -> int:
    """The largest cap on each text's tokens whose capped sizes together fit ``room`` (0 when nothing fits)."""
    low, high = 0, max(sizes, default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(size, middle) for size in sizes) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _cut(text: str, cap: int, size: int) -> str:
    """``text`` (``size`` tokens) cut to at most ``cap`` tokens with the marker; never longer than it was."""
    marker_tokens = estimate_text_tokens(CUT_MARKER.format(n=len(text)))
    if cap <= marker_tokens:
        marker = CUT_MARKER.format(n=len(text)).lstrip()
        return marker if estimate_text_tokens(marker) < size else text
    head = _prefix_within(text, cap - marker_tokens)
    return head + CUT_MARKER.format(n=len(text) - len(head))
