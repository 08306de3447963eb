"""Reading ``config.yaml``: YAML, then ``${VAR}`` substitution, then validation, every problem reported at once.

A file that cannot be a config (over :data:`MAX_FILE_BYTES`, not UTF-8, nested
or aliased past the bounds of :mod:`.yaml_limits`) is refused in one line that
says where, before anything walks its content.
"""

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
from botgateway.config.yaml_limits import YamlLimitError, load_yaml

__all__ = ["MAX_FILE_BYTES", "load_config", "parse_config"]

MAX_FILE_BYTES = 2**20
"""Largest config file read (1 MiB); a real one is a few KiB, and a bigger file is the wrong file."""


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
    return parse_config(_parse_yaml(_read_text(path), str(path)), env, str(path))


def _read_text(path: Path) -> str:
    """The file's text; a file too large to be a config is refused before it is read whole."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([f"file not found (looked in {path.resolve().parent})"], str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read the file: {exc.strerror}"], str(path)) from None
    if len(raw) > MAX_FILE_BYTES:
        too_large = f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB; a config is never that large (is it the right file?)"
        raise ConfigError([too_large], str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise ConfigError([f"not UTF-8 text: {where} cannot be decoded (save the file as UTF-8)"], str(path)) from None


def _parse_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``, every failure one line with its position."""
    try:
        return load_yaml(text)
    except yaml.reader.ReaderError as exc:
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        problem = f"position {exc.position}: invalid YAML: unacceptable character #x{code:04x}: {exc.reason}"
    except YamlLimitError as exc:
        problem = f"{_where(exc)}{exc.problem}"
    except yaml.YAMLError as exc:
        problem = f"{_where(exc)}invalid YAML: {getattr(exc, 'problem', None) or exc}"
    raise ConfigError([" ".join(problem.split())], source)


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
