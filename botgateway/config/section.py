"""The base of every config section, and the one rule of which config values may hold a credential."""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr
from pydantic.fields import FieldInfo

__all__ = ["SECRET_BEARING", "SecretBearing", "Section", "is_secret_bearing"]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, defaults are validated too, and a loaded config is immutable."""

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)


class SecretBearing:
    """Marks a field whose values may carry a credential though they are not ``SecretStr``: ``Annotated[list[str], SECRET_BEARING]``."""

    def __repr__(self) -> str:
        return "SECRET_BEARING"


SECRET_BEARING = SecretBearing()
"""The marker: a command line or an argument list may hold ``--token=…``, yet the program needs it as plain text."""

_SECRET_NAME = re.compile(r"secret|token|key|passw|auth|headers|env|url", re.IGNORECASE)
"""Keys named like a credential; covers fields not (yet) marked, and the keys of free-form mappings."""


def is_secret_bearing(name: str, field: FieldInfo | None = None) -> bool:
    """Whether values under key ``name`` (a section's ``field``, when it is one) may hold a credential.

    They may when the field is marked :data:`SECRET_BEARING`, when it is typed
    ``SecretStr`` (also inside a list, a mapping or an optional), or when the
    key is named like a credential. No message may echo such a value.
    """
    if _SECRET_NAME.search(name):
        return True
    if field is None:
        return False
    return any(isinstance(m, SecretBearing) for m in field.metadata) or _holds_secret_str(field.annotation)


def _holds_secret_str(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    return any(_holds_secret_str(arg) for arg in typing.get_args(annotation))
