"""Token estimates: roughly right, deterministic and cheap.

Exact counts need the provider's tokenizer; the history budget only has to be
roughly right. Real tokenizers give about one token per common
Chinese/Japanese/Korean character and about four characters per token for
English, code, JSON and IPs; mixed text is estimated part by part.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "content_text",
    "estimate_message_tokens",
    "estimate_text_tokens",
    "estimate_tokens",
    "truncate_to_tokens",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Per-message framing (role, separators) that chat templates add."""
TOOL_CALL_OVERHEAD_TOKENS = 6
"""Per-tool-call framing (id, type, name keys) on top of the name and arguments."""
CHARS_PER_TOKEN = 4
"""Non-CJK text: about four characters per token for English, code, JSON and IPs."""

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
    low, high = 0, len(text)
    while low < high:  # longest prefix within the budget
        middle = (low + high + 1) // 2
        if estimate_text_tokens(text[:middle]) + 1 <= max_tokens:
            low = middle
        else:
            high = middle - 1
    cut = text[:low]
    for stop in ("\n", " "):
        at = cut.rfind(stop)
        if at > low * 0.7:
            cut = cut[:at]
            break
    return cut.rstrip() + " …"
