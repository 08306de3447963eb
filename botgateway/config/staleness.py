"""A ``check-config`` warning: ``card.stale_after_s`` that no cached tool result can ever reach.

A tool line says its result came from a cache ("cached 12 min ago") once the
result is older than ``card.stale_after_s``; the cloud providers keep results
for their ``cache_ttl_s``. A threshold at or past that TTL never shows the note,
which is legal but surely not what was meant.
"""

from __future__ import annotations

from botgateway.config.schema import Config

__all__ = ["CACHED_PROVIDERS", "staleness_warnings"]

CACHED_PROVIDERS = ("aliyun", "tencent", "aws")
"""The sections under ``tools`` whose results are cached (``tools.<name>.cache_ttl_s``)."""


def staleness_warnings(config: Config) -> list[str]:
    """A line when ``card.stale_after_s`` is not below the cache TTL of an enabled provider that caches."""
    stale_after_s = config.card.stale_after_s
    caches = [
        f"tools.{name}.cache_ttl_s ({provider.cache_ttl_s:g} s)"
        for name in CACHED_PROVIDERS
        if (provider := getattr(config.tools, name)).enabled and 0 < provider.cache_ttl_s <= stale_after_s
    ]
    if not caches:
        return []
    return [(
        f"card: card.stale_after_s ({stale_after_s:g} s) is not below {', '.join(caches)}: a cached result is never "
        "that old, so no tool line ever says 'cached N min ago'; lower card.stale_after_s (default 30) "
        "or raise the cache TTL"
    )]
