"""Group lookups for an adapter a test env already built: the resolver ``botgateway run`` passes to its constructor."""

from __future__ import annotations

from typing import Any

from botgateway.cli.run import group_resolver
from botgateway.config import Config

__all__ = ["attach_group_resolver"]


def attach_group_resolver(adapter: Any, config: Config) -> None:
    """Give a Slack or DingTalk ``adapter`` the resolver :func:`~botgateway.cli.run.build_adapter` would have given
    its constructor for ``config``'s policy (over the adapter's own API client); nothing when it names no groups.

    What the adapter resolves itself (an asker's message, :meth:`resolve_principal`) uses it from then on; button
    handlers built before keep the resolver they were given.
    """
    client = adapter.client if adapter.name == "slack" else adapter.api
    resolver = group_resolver(adapter.name, client, adapter.config, config)
    if resolver is not None:
        adapter.groups = resolver
