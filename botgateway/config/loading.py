"""Reading ``config.yaml``: YAML, then ``${VAR}`` substitution, then validation, every problem reported at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from botgateway.config.env import substitute_env
from botgateway.config.errors import ConfigError
from botgateway.config.problems import format_errors
from botgateway.config.schema import Config

__all__ = ["load_config", "parse_config"]


def parse_config(data: Any, env: Mapping[str, str] | None = None, source: str = "config") -> Config:
    """Validate already-parsed YAML; raises :class:`ConfigError` with every problem."""
    env = os.environ if env is None else env
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(["<root>: the file must be a mapping of sections (llm:, adapters:, …)"], source)
    problems: list[str] = []
    data = substitute_env(data, env, problems=problems)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems + format_errors(exc), source) from None
    if problems:
        raise ConfigError(problems, source)
    return config


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate ``path`` (``config.yaml`` by default; defaults if it does not exist and was not named)."""
    if path is None:
        candidate = Path("config.yaml")
        if not candidate.exists():
            return parse_config({}, env, "defaults")
        path = candidate
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"file not found (looked in {path.resolve().parent})"], str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read the file: {exc.strerror}"], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}invalid YAML: {problem}"], str(path)) from None
    return parse_config(data, env, str(path))
