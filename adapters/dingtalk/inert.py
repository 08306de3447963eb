"""DingTalk-safe model text and display names.

DingTalk draws remote images in markdown (robot messages and AI cards), so an
image is an exfiltration path: images become text, and links, masked links and
the HTML the card markdown honours follow the rule every platform shares
(:func:`~botgateway.cards.inert.inert_markup`).
A message notifies everyone only through its ``at.isAtAll`` field, which the
sinks never set; the text ``@所有人`` / ``@all`` (or an ``@mobile``) still gets
a zero-width space after the ``@`` so no client or forwarding bot reads it as
one. Inside code it is left as written. Display names go into a bold header,
so their markdown characters become full-width look-alikes: DingTalk's dialect
has no reliable backslash escape, and a name must neither end the bold early
nor draw a link or an image.
"""

from __future__ import annotations

import re

from botgateway.cards.inert import inert_markup, sub_outside_code

__all__ = ["dingtalk_inert", "escape_name"]

_AT_ALL = re.compile(r"@(?=所有人|(?:all|everyone|here)(?![\w])|\+?\d{6,}(?!\d))", re.IGNORECASE)
_NAME_MARKUP = str.maketrans({
    "*": "＊", "_": "＿", "`": "｀", "[": "［", "]": "］", "(": "（", ")": "）", "<": "＜", ">": "＞",
    "!": "！", "#": "＃", "|": "｜", "~": "～", "\\": "＼", "&": "＆", "@": "＠", "\n": " ", "\r": " ", "\t": " ",
})


def dingtalk_inert(text: str, locale: str) -> str:
    """``text`` safe to draw in DingTalk markdown: images as text, only safe links, no HTML, ``@所有人``, ``@all``
    and ``@mobile`` inert."""
    text = inert_markup(text, locale)
    return sub_outside_code(_AT_ALL, text, lambda m: "@\u200b") if "@" in text else text


def escape_name(name: str) -> str:
    """A display name that reads the same but cannot change the markdown around it."""
    return " ".join(name.translate(_NAME_MARKUP).split())
