"""Validation errors in plain words: one line per problem, with its key path and a hint."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from botgateway.config.schema import Config

__all__ = ["format_errors"]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The section model that holds the key at ``loc`` (for 'did you mean' hints)."""
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model


_MAY_HOLD_SECRET = re.compile(r"secret|token|key|passw|auth|headers|env|url", re.IGNORECASE)
"""Paths whose wrong values are not echoed in error messages: they may be (part of) a credential."""


def format_errors(error: ValidationError) -> list[str]:
    """One line per problem: dotted key path, what is wrong, and a hint."""
    problems = []
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
        kind = item["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc)
            known = list(model.model_fields) if model else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (f"known keys: {', '.join(known)}" if known else "remove it")
            problems.append(f"{path}: unknown key ({hint})")
        elif kind == "missing":
            problems.append(f"{path}: required key is missing")
        else:
            got = item.get("input")
            shown = "" if isinstance(got, (dict, list)) or _MAY_HOLD_SECRET.search(path) else f" (got {got!r})"
            msg = item["msg"].removeprefix("Value error, ")
            problems.append(f"{path or '<root>'}: {msg}{shown}")
    return problems
