"""Validation errors in plain words: one line per problem, with its key path and a hint.

A wrong value is echoed only when no secret can hide in it
(:func:`~botgateway.config.section.is_secret_bearing` decides), and even then
with token-like text masked.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from botgateway.config.schema import Config
from botgateway.config.section import is_secret_bearing

__all__ = ["MOVED_KEYS", "format_errors", "plain_word"]


def _section_of(field: FieldInfo) -> type[BaseModel] | None:
    """The section model a field holds (itself, in a list, a mapping or an optional), if any."""
    annotation = field.annotation
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The section model that holds the key at ``loc`` (for 'did you mean' hints)."""
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _section_of(field)
        if model is None:
            return None
    return model


def _secret_at(loc: tuple[Any, ...]) -> bool:
    """Whether the value at ``loc`` lies under a key whose values may hold a credential."""
    model: Any = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part) if model is not None else None
        if is_secret_bearing(str(part), field):
            return True
        model = _section_of(field) if field is not None else None
    return False


_SERVER_MOVED = "one HTTP server now serves /metrics, /healthz and /readyz"

MOVED_KEYS: dict[tuple[str, ...], tuple[str, str]] = {
    ("metrics", "host"): ("http.host", _SERVER_MOVED),
    ("metrics", "port"): ("http.port", _SERVER_MOVED),
}
"""Keys an older release read → where they live now and why: an old config is told where to move them."""

_PLAIN_WORD = re.compile(r"[\w./+-]{1,100}")
"""A program name or path: nothing that assigns (``=``), nothing of a URL's ``user:password@``."""

_OPAQUE_RUN = re.compile(r"[A-Za-z0-9]{16,}")
"""A long run of letters and digits: how generated tokens look (``ghp_…``, hex keys)."""


def _masked(text: str) -> str:
    # Imported on use: the masking pulls in the logging stack, which a config that fails to load never needs.
    from botgateway.redaction import redact_text

    return redact_text(text)


def plain_word(text: str) -> str | None:
    """The first word of ``text`` when it cannot carry a secret, to name it in a message; otherwise ``None``."""
    words = text.split()
    if not words:
        return None
    word = words[0]
    if not _PLAIN_WORD.fullmatch(word) or _masked(word) != word:
        return None
    for run in _OPAQUE_RUN.findall(word):
        if re.search(r"\d", run) and re.search(r"[A-Za-z]", run):
            return None
    return word


def format_errors(error: ValidationError) -> list[str]:
    """One line per problem: dotted key path, what is wrong, and a hint."""
    problems = []
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
        kind = item["type"]
        moved = MOVED_KEYS.get(tuple(str(p) for p in loc)) if kind == "extra_forbidden" else None
        if moved is not None:
            problems.append(f"{path}: moved to {moved[0]} ({moved[1]}); set {moved[0]} instead")
        elif kind == "extra_forbidden":
            model = _model_at(loc)
            known = list(model.model_fields) if model else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(known)}" if known else "remove it")
            problems.append(f"{path}: unknown key ({hint})")
        elif kind == "missing":
            problems.append(f"{path}: required key is missing")
        else:
            got = item.get("input")
            shown = "" if isinstance(got, (dict, list)) or _secret_at(loc) else f" (got {_masked(repr(got))})"
            msg = item["msg"].removeprefix("Value error, ")
            problems.append(f"{path or '<root>'}: {msg}{shown}")
    return problems
