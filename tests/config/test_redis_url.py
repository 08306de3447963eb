"""``memory.redis_url`` at config load: the accepted forms pass, anything else is one clear problem, password unsaid."""

from __future__ import annotations

import pytest

from botgateway.config import ConfigError, parse_config
from botgateway.redis_url import ACCEPTED_FORMS, SENTINEL_FORM

PASSWORD = "pw-8c1f0e77d2"


def problems_of(url: str, store: str = "redis") -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config({"memory": {"store": store, "redis_url": url}}, {})
    return info.value.problems


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://x",  # what deploy/README.md's check-config line passes
        f"redis://:{PASSWORD}@redis.internal:6380/2",
        f"rediss://default:{PASSWORD}@redis.internal:6380/0?ssl_cert_reqs=required",
        f"unix://:{PASSWORD}@/run/redis/redis.sock?db=1",
        "redis+sentinel://sentinel-0:26379,sentinel-1:26379,sentinel-2/mymaster",
        f"redis+sentinel://:{PASSWORD}@10.0.0.1,10.0.0.2:26380/mymaster/3?sentinel_password={PASSWORD}",
        f"rediss+sentinel://app:{PASSWORD}@[fd00::1]:26379/mymaster?ssl_ca_certs=/etc/redis/ca.pem",
    ],
)
def test_the_accepted_forms_load(url: str) -> None:
    config = parse_config({"memory": {"store": "redis", "redis_url": url}}, {})
    assert config.memory.redis_url.get_secret_value() == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"http://:{PASSWORD}@redis.internal:6379/0", "unknown scheme 'http'"),
        (f"redis+cluster://:{PASSWORD}@node-0:6379,node-1:6379", "Redis Cluster is not supported"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0:26379", "no service name"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0:26379/", "no service name"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0:26379,sentinel-1:99999/mymaster", "Sentinel 2's port"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0:2x6379/mymaster", "Sentinel 1's port"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0,,sentinel-2/mymaster", "Sentinel 2 has no host"),
        (f"redis+sentinel://:{PASSWORD}@sentinel-0/mymaster/db1", "only a database number"),
        (f"redis+sentinel://sentinel-0/mymaster?password={PASSWORD}", "unknown option 'password'"),
        (f"redis+sentinel://sentinel-0/mymaster?ssl_ca_certs=/ca.pem&sentinel_password={PASSWORD}", "rediss+sentinel"),
        (f"redis://:{PASSWORD}@redis.internal:63x9/0", "port must be a number"),
        (f"redis://:{PASSWORD}", "port must be a number"),
        (f"redis://:{PASSWORD}@redis.internal:6379/zero", "database must be a number"),
        (f"redis://:{PASSWORD}@redis-0,redis-1/0", "redis+sentinel://"),
        (f"redis://:{PASSWORD}@redis.internal/0?socket_timeout=soon", "'socket_timeout'"),
        ("unix://", "socket's path"),
        (f"{PASSWORD}@redis.internal:6379", "not a URL"),
    ],
)
def test_a_bad_url_is_one_problem_that_names_the_key_and_what_to_write_never_the_password(url: str, says: str) -> None:
    [problem] = problems_of(url)
    assert problem.startswith("memory.redis_url: ") and says in problem
    assert PASSWORD not in problem


def test_the_messages_list_the_accepted_forms() -> None:
    [unknown] = problems_of("memcached://cache:11211")
    assert ACCEPTED_FORMS in unknown
    [no_service] = problems_of("redis+sentinel://sentinel-0:26379")
    assert SENTINEL_FORM in no_service and "sentinel monitor" in no_service


def test_an_empty_url_is_left_alone_unless_redis_is_the_store() -> None:
    assert parse_config({"memory": {"store": "sqlite", "redis_url": ""}}, {}).memory.store == "sqlite"
    [problem] = problems_of("")
    assert problem.startswith("memory.redis_url: not a URL")
    # A wrong URL is wrong whatever the store: it is caught before someone switches to Redis.
    [problem] = problems_of("redis+sentinel://sentinel-0", store="sqlite")
    assert "no service name" in problem


def test_a_url_from_the_environment_is_checked_after_substitution() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"memory": {"store": "redis", "redis_url": "${REDIS_URL}"}},
                     {"REDIS_URL": f"redis+sentinel://:{PASSWORD}@sentinel-0"})
    [problem] = info.value.problems
    assert "memory.redis_url: no service name" in problem and PASSWORD not in problem
