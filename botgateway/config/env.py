"""``${VAR}`` and ``${VAR:-default}`` in config strings, filled from the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["substitute_env"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(value: Any, env: Mapping[str, str], path: str = "", problems: list[str] | None = None) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of ``value``.

    A missing variable without a default is recorded in ``problems`` with its path.
    A string that is exactly one reference to an unset variable with an empty default
    becomes ``None``-free empty string, so optional secrets stay optional.
    """
    problems = problems if problems is not None else []
    if isinstance(value, str):
        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env and env[name] != "":
                return env[name]
            if default is not None:
                return default
            problems.append(f"{path or '<root>'}: environment variable {name} is not set (use ${{{name}:-default}} to make it optional)")
            return ""

        return _VAR.sub(repl, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value
