"""Plugin registration. Imports no redis: the client loads when a server is started with this cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import CacheRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import ResponseCache

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


def _make_cache(settings: dict[str, str]) -> ResponseCache:
    from inferd_cache_redis.cache import create_redis_cache

    return create_redis_cache(settings)


@hookimpl
def inferd_register_caches(register: CacheRegister) -> None:
    """Register the ``redis`` cache."""
    register("redis", _make_cache)
