"""The ``redis`` response cache: entries live in a Redis server that several inferd servers may share.

Settings follow Triton's redis cache (``--cache-config redis,<setting>=<value>``): ``host`` and
``port`` (required), ``user``, ``password``, ``db``, ``connect_timeout``, ``socket_timeout``,
``wait_timeout`` (milliseconds), ``pool_size``; and inferd's ``ttl`` (seconds an entry lives; 0,
the default, keeps it until Redis evicts it under its own ``maxmemory-policy``).
"""

from __future__ import annotations

import logging
from typing import cast

import redis

from inferd.api import InferResponse, InvalidArgument, ResponseCache
from inferd_cache_redis.codec import decode, encode

log = logging.getLogger(__name__)

KEY_PREFIX = b"inferd:"
SETTINGS = (
    "host",
    "port",
    "user",
    "password",
    "db",
    "connect_timeout",
    "socket_timeout",
    "wait_timeout",
    "pool_size",
    "ttl",
)
#: inferd's defaults; Triton waits forever (0) for connects and replies, and pools 1 connection.
DEFAULTS = {
    "db": "0",
    "connect_timeout": "1000",
    "socket_timeout": "1000",
    "wait_timeout": "100",
    "pool_size": "8",
    "ttl": "0",
}


class RedisCache(ResponseCache):
    """Stores each response under ``inferd:<hex key>`` with ``SET`` (and ``EX ttl`` when set)."""

    blocking = True  # network I/O: core calls lookup/insert in worker threads

    def __init__(self, client: redis.Redis, ttl: int = 0) -> None:
        self.client = client
        self.ttl = ttl

    @staticmethod
    def redis_key(key: bytes) -> bytes:
        return KEY_PREFIX + key.hex().encode()

    def lookup(self, key: bytes) -> InferResponse | None:
        data = self.client.get(self.redis_key(key))
        return None if data is None else decode(cast(bytes, data))  # the client does not decode responses

    def insert(self, key: bytes, response: InferResponse) -> None:
        self.client.set(self.redis_key(key), encode(response), ex=self.ttl or None)

    def close(self) -> None:
        self.client.close()
        self.client.connection_pool.disconnect()


def _int(settings: dict[str, str], name: str, minimum: int = 0) -> int:
    raw = settings[name]
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"redis cache: '{name}' must be a whole number, got '{raw}'") from None
    if value < minimum:
        raise InvalidArgument(f"redis cache: '{name}' must be at least {minimum}, got {value}")
    return value


def _seconds(ms: int) -> float | None:
    return ms / 1000 if ms > 0 else None  # 0: wait forever, as in Triton


def create_redis_cache(settings: dict[str, str]) -> RedisCache:
    """Build the cache from ``--cache-config redis,...`` settings; checks that Redis answers."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise InvalidArgument(f"redis cache: unknown setting '{unknown[0]}'; it accepts: {', '.join(SETTINGS)}")
    missing = [s for s in ("host", "port") if not settings.get(s)]
    if missing:
        raise InvalidArgument(
            f"redis cache needs '{missing[0]}': --cache-config redis,host=HOST --cache-config redis,port=PORT"
        )
    s = {**DEFAULTS, **settings}
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]  # redis does not annotate it
        host=s["host"],
        port=_int(s, "port", 1),
        db=_int(s, "db"),
        username=s.get("user") or None,
        password=s.get("password") or None,
        socket_connect_timeout=_seconds(_int(s, "connect_timeout")),
        socket_timeout=_seconds(_int(s, "socket_timeout")),
        max_connections=_int(s, "pool_size", 1),
        timeout=_seconds(_int(s, "wait_timeout")),
    )
    cache = RedisCache(redis.Redis(connection_pool=pool), ttl=_int(s, "ttl"))
    try:
        cache.client.ping()
    except redis.RedisError as exc:  # Triton serves on without the cache while Redis is down
        log.warning(
            "redis cache: %s:%s does not answer yet (%s); requests run uncached until it does",
            s["host"],
            s["port"],
            exc,
        )
    return cache
