"""What ``memory.redis_url`` may say: the accepted forms, read into their parts, and masked for messages.

- ``redis://[[user]:password@]host[:port][/db]`` — one Redis (``rediss://`` for TLS);
- ``unix://[[user]:password@]/path/to/redis.sock[?db=N]`` — one Redis on a Unix socket;
- ``redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/service_name[/db]`` — the master
  that the Redis Sentinels at those addresses (port 26379 unless given) know as ``service_name``;
  ``rediss+sentinel://`` speaks TLS to the Sentinels and to the master. The user and password are
  the master's; ``?sentinel_password=…`` (and ``&sentinel_username=…``) authenticate to the
  Sentinels when they require it. With TLS, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``
  and ``ssl_cert_reqs`` (redis-py's names, as a ``rediss://`` URL takes them) apply to both.

Redis Cluster (``redis+cluster://``) is refused. Every Lua script keeps its keys
in one hash slot (the conversation's and the rate key's ``{hash tags}``), but the
history reads and writes conversations as pipelines of scripts, and redis-py's
cluster client refuses scripts in a pipeline (``EVALSHA`` is among its
blocked pipeline commands); a single Redis or Sentinel serves a fleet instead.

Only the standard library is used, so the config can check a URL without
loading a Redis client; :mod:`botgateway.stores.redis_connect` connects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "ACCEPTED_FORMS",
    "SENTINEL_FORM",
    "SENTINEL_PORT",
    "DirectUrl",
    "RedisUrl",
    "SentinelUrl",
    "mask_url",
    "parse_redis_url",
]

SENTINEL_FORM = "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db]"
"""The Sentinel form, as a message about a wrong Sentinel URL shows it."""

ACCEPTED_FORMS = (
    "redis://[[user]:password@]host[:port][/db] (rediss:// for TLS), unix:///path/to/redis.sock, "
    f"or {SENTINEL_FORM} (rediss+sentinel:// for TLS)"
)
"""The forms a message about a wrong URL lists."""

SENTINEL_PORT = 26379
"""A Sentinel's port when its address gives none."""

_DIRECT = frozenset({"redis", "rediss", "unix"})
_SENTINEL = frozenset({"redis+sentinel", "rediss+sentinel"})
_CLUSTER = frozenset({"redis+cluster", "rediss+cluster"})
_SENTINEL_PARAMETERS = ("sentinel_username", "sentinel_password")
_TLS_PARAMETERS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_PLAIN_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")
_PLAIN_NAME = re.compile(r"[a-z_]{1,40}")
_MASK = "***"


@dataclass(frozen=True)
class DirectUrl:
    """One Redis, by a URL redis-py reads itself (``redis://``, ``rediss://``, ``unix://``)."""

    url: str
    """The URL as configured."""

    def __repr__(self) -> str:
        return f"DirectUrl({mask_url(self.url)!r})"


@dataclass(frozen=True)
class SentinelUrl:
    """The master a group of Redis Sentinels names (``redis+sentinel://``)."""

    sentinels: tuple[tuple[str, int], ...]
    """The Sentinels' addresses, in the URL's order."""
    service_name: str
    """The master's name as the Sentinels know it (``sentinel monitor <name> …``)."""
    db: int = 0
    """The database number on the master."""
    username: str | None = None
    """The master's ACL user (``None``: the default user)."""
    password: str | None = None
    """The master's password."""
    sentinel_username: str | None = None
    """The Sentinels' ACL user."""
    sentinel_password: str | None = None
    """The Sentinels' password (their ``requirepass``)."""
    tls: bool = False
    """TLS to the Sentinels and the master (``rediss+sentinel://``)."""
    tls_options: tuple[tuple[str, str], ...] = ()
    """redis-py's TLS options (``ssl_ca_certs``, …) for both, as given in the query."""

    def __repr__(self) -> str:
        hosts = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.sentinels)
        return f"SentinelUrl({hosts}/{self.service_name}/{self.db}, tls={self.tls})"


RedisUrl = DirectUrl | SentinelUrl
"""A ``memory.redis_url`` read into what to connect to."""


def parse_redis_url(url: str) -> RedisUrl:
    """Read ``url`` as one of the accepted forms; ValueError saying what is wrong and what is accepted otherwise.

    A message never repeats the URL or its parts (its password could be
    anywhere in a mistyped one), only a scheme or an option's name that looks like one.
    """
    scheme, sep, _ = url.strip().partition("://")
    if not sep:
        raise ValueError(f"not a URL (no scheme://); use {ACCEPTED_FORMS}")
    if scheme in _CLUSTER:
        raise ValueError(
            "Redis Cluster is not supported; use a single Redis (redis://host:6379/0) or Redis Sentinel "
            "(redis+sentinel://host:26379/service_name), which fails over to a replica"
        )
    if scheme in _DIRECT:
        return _direct(url.strip(), scheme)
    if scheme in _SENTINEL:
        return _sentinel(url.strip(), tls=scheme == "rediss+sentinel")
    shown = f" {scheme!r}" if _PLAIN_SCHEME.fullmatch(scheme) else ""
    raise ValueError(f"unknown scheme{shown}; use {ACCEPTED_FORMS}")


def _direct(url: str, scheme: str) -> DirectUrl:
    """Check what redis-py would misread quietly (a bad port or database, several hosts) or refuse later."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"the port must be a number from 1 to 65535; use {ACCEPTED_FORMS}") from None
    if scheme == "unix":
        if not parts.path.strip("/"):
            raise ValueError("a unix:// URL needs the socket's path, as in unix:///run/redis/redis.sock")
    else:
        if port == 0:
            raise ValueError(f"the port must be a number from 1 to 65535; use {ACCEPTED_FORMS}")
        if "," in (parts.hostname or ""):
            raise ValueError("a redis:// URL names one host; for several Sentinels use redis+sentinel://")
        db = unquote(parts.path).strip("/")
        if db and not db.isdigit():
            raise ValueError(f"the database must be a number, as in {scheme}://host:6379/0")
    if parts.query:
        _check_query_with_redis_py(url)
    return DirectUrl(url)


def _check_query_with_redis_py(url: str) -> None:
    """Options in the query (``?socket_timeout=5``) are redis-py's: let it say whether it can read them."""
    from redis.connection import parse_url  # imported only for a URL with options: the config loads without it

    try:
        parse_url(url)
    except ValueError as exc:
        name = re.search(r"'([a-z_]+)'", str(exc))
        which = f" {name.group(1)!r}" if name else ""
        raise ValueError(
            f"the value of the option{which} in the URL's query is not one redis-py can read "
            "(a number, or true/false, as the option needs); correct it or remove it"
        ) from None


def _sentinel(url: str, *, tls: bool) -> SentinelUrl:
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    rest = rest.split("#", 1)[0]
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_address(host, n) for n, host in enumerate(hosts.split(","), start=1))
    names = [unquote(part) for part in path.split("/")] if slash else []
    if names and names[-1] == "" and len(names) > 1:
        names.pop()  # a trailing slash
    if not names or not names[0].strip():
        raise ValueError(
            "no service name: end the URL with the master's name as the Sentinels know it "
            f"(sentinel monitor <name> ...), as in redis+sentinel://host:26379/mymaster; use {SENTINEL_FORM}"
        )
    if len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise ValueError(f"after the service name only a database number may follow; use {SENTINEL_FORM}")
    options = _sentinel_options(query, tls=tls)
    return SentinelUrl(
        sentinels=sentinels,
        service_name=names[0],
        db=int(names[1]) if len(names) == 2 else 0,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
        tls=tls,
        tls_options=tuple((name, value) for name, value in options.items() if name in _TLS_PARAMETERS),
    )


def _address(text: str, n: int) -> tuple[str, int]:
    """``host[:port]`` or ``[v6 address][:port]`` of the ``n``-th Sentinel."""
    host, port = text.strip(), ""
    if host.startswith("["):
        inside, bracket, after = host[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise ValueError(f"Sentinel {n}'s address is not [IPv6 address]:port; use {SENTINEL_FORM}")
        host, port = inside, after[1:]
    elif ":" in host:
        host, _, port = host.rpartition(":")
    if not host:
        raise ValueError(f"Sentinel {n} has no host; use {SENTINEL_FORM}")
    if not port:
        return host, SENTINEL_PORT
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"Sentinel {n}'s port must be a number from 1 to 65535; use {SENTINEL_FORM}")
    return host, int(port)


def _sentinel_options(query: str, *, tls: bool) -> dict[str, str]:
    known = _SENTINEL_PARAMETERS + (_TLS_PARAMETERS if tls else ())
    accepted = ", ".join(f"{name}=..." for name in known)
    try:
        found = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"the URL's query is not name=value pairs; a Sentinel URL takes {accepted}") from None
    options: dict[str, str] = {}
    for name, values in found.items():
        if name in _TLS_PARAMETERS and not tls:
            raise ValueError(f"{name} is a TLS option: use rediss+sentinel:// for TLS")
        if name not in known:
            shown = f" {name!r}" if _PLAIN_NAME.fullmatch(name) else ""
            raise ValueError(
                f"unknown option{shown}: a Sentinel URL takes {accepted} (the master's password goes before the @, "
                "as in redis+sentinel://:password@host:26379/mymaster)"
            )
        options[name] = values[-1]
    return options


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (the user's, and ``…password=`` options); never raises.

    Everything between the first ``:`` of the user part and the last ``@``
    is masked, so a password holding ``@``, ``/`` or ``?`` is masked whole.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _MASK if "@" in url or ":" in url else url
    userinfo, at, after = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:{_MASK}@{after}"
    rest = re.sub(r"(?i)([?&][^=&#]*pass[^=&#]*=)[^&#]*", rf"\1{_MASK}", rest)
    return f"{scheme}{sep}{rest}"
