"""What the cloud providers share about driving an SDK: endpoints, keys, credential chains, error reasons."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from botgateway.config import CloudAccount, ConfigError

if TYPE_CHECKING:
    from tools.providers.cloud import CloudProvider

__all__ = [
    "as_tuple",
    "credential_chain_configured",
    "first",
    "require_sdk",
    "resolve_keys",
    "short_reason",
    "split_endpoint",
    "tag_filter",
]


def split_endpoint(endpoint: str | None) -> tuple[str | None, str | None]:
    """``http://127.0.0.1:9000`` → (``http``, ``127.0.0.1:9000``); a bare host keeps the default scheme."""
    if not endpoint:
        return None, None
    match = re.match(r"^(https?)://(.+?)/*$", endpoint.strip())
    if match:
        return match.group(1), match.group(2)
    return None, endpoint.strip().rstrip("/")


def first(*values: Any) -> Any:
    """The first value that is not empty."""
    for value in values:
        if value not in (None, "", [], {}):
            return value
    return None


def as_tuple(values: Iterable[Any] | None) -> tuple[str, ...]:
    """Non-empty strings, deduplicated, order kept."""
    out: list[str] = []
    for value in values or ():
        if value and str(value) not in out:
            out.append(str(value))
    return tuple(out)


def short_reason(code: str, message: str = "", *, limit: int = 140) -> str:
    """``code: message`` cut to ``limit`` characters, for an unmapped SDK error."""
    text = f"{code}: {message}" if code and message else (code or message or "unknown error")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resolve_keys(account: CloudAccount, id_env: str, secret_env: str, token_env: str) -> tuple[str, str, str | None]:
    """(key id, secret, session token): the account's keys, else the SDK's usual environment variables.

    A session token from the environment belongs to the environment's keys, so it
    is only used when the keys came from there too.
    """
    configured = account.access_key_id.get_secret_value()
    key_id = configured or os.environ.get(id_env, "")
    secret = account.access_key_secret.get_secret_value() or os.environ.get(secret_env, "")
    token = None if configured else (os.environ.get(token_env) or None)
    return key_id, secret, token


def credential_chain_configured(env_names: Iterable[str], home_files: Iterable[tuple[str, ...]]) -> bool:
    """Whether an SDK's default credential chain has something to find besides plain keys.

    Checked first because an unconfigured chain ends by probing the instance
    metadata service, which hangs on every call outside the cloud.
    """
    if any(os.environ.get(name) for name in env_names):
        return True
    home = os.path.expanduser("~")
    return any(os.path.exists(os.path.join(home, *parts)) for parts in home_files)


def tag_filter(tag: str) -> dict[str, Any]:
    """The ``Filters`` entry for ``key=value`` (``tag:key``) or a bare ``key`` (``tag-key``); EC2 and CVM agree."""
    key, sep, value = tag.partition("=")
    if sep:
        return {"Name": f"tag:{key.strip()}", "Values": [value.strip()]}
    return {"Name": "tag-key", "Values": [key.strip()]}


def require_sdk(modules: Iterable[str], provider: type[CloudProvider], section: str) -> None:
    """Raise :class:`ConfigError` naming the extra to install when an SDK module is missing."""
    import importlib.util

    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ConfigError([provider.missing_sdk(section)], source="tools")
