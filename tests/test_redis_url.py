"""``memory.redis_url`` read into its parts, masked for messages, and its passwords kept out of log lines."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json

import pytest
import structlog
from structlog.testing import capture_logs

from botgateway.config import parse_config
from botgateway.redaction import RedactSecrets, redact_text, secret_values
from botgateway.redis_url import DirectUrl, SentinelUrl, mask_url, parse_redis_url
from botgateway.stores.redis_connect import SentinelMaster, redis_client
from tests.fakes.stores import REDIS_URL

MASTER_PW = "master-pw-4e91"
SENTINEL_PW = "sentinel-pw-a07c"


def test_a_sentinel_url_is_read_into_its_sentinels_service_database_and_credentials() -> None:
    url = (f"rediss+sentinel://app:{MASTER_PW.replace('-', '%2D')}@s0.internal,s1.internal:26380,[fd00::7]:26381"
           f"/my%20master/4?sentinel_username=watcher&sentinel_password={SENTINEL_PW}&ssl_ca_certs=/etc/ca.pem")
    parsed = parse_redis_url(url)
    assert parsed == SentinelUrl(
        sentinels=(("s0.internal", 26379), ("s1.internal", 26380), ("fd00::7", 26381)),
        service_name="my master",
        db=4,
        username="app",
        password=MASTER_PW,
        sentinel_username="watcher",
        sentinel_password=SENTINEL_PW,
        tls=True,
        tls_options=(("ssl_ca_certs", "/etc/ca.pem"),),
    )
    assert MASTER_PW not in repr(parsed) and SENTINEL_PW not in repr(parsed)


def test_a_sentinel_url_without_credentials_or_database() -> None:
    assert parse_redis_url("redis+sentinel://127.0.0.1/mymaster/") == SentinelUrl(
        sentinels=(("127.0.0.1", 26379),), service_name="mymaster"
    )


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://h", f"unix://:{MASTER_PW}@/run/redis.sock"])
def test_a_direct_url_is_left_to_redis_py(url: str) -> None:
    parsed = parse_redis_url(url)
    assert parsed == DirectUrl(url)
    assert MASTER_PW not in repr(parsed)


def test_the_client_of_a_sentinel_url_asks_the_sentinels_with_their_own_password_and_the_callers_timeouts() -> None:
    client = redis_client(f"redis+sentinel://:{MASTER_PW}@127.0.0.1:1,127.0.0.1:2/mymaster/2"
                          f"?sentinel_password={SENTINEL_PW}", socket_timeout=1.5, client_name="botgateway:x")
    assert isinstance(client, SentinelMaster) and client.sentinel is not None
    master = client.connection_pool.connection_kwargs
    assert (master["password"], master["db"], master["socket_timeout"], master["client_name"]) == (
        MASTER_PW, 2, 1.5, "botgateway:x")
    sentinels = [s.connection_pool.connection_kwargs for s in client.sentinel.sentinels]
    assert [(s["port"], s["password"], s["socket_timeout"]) for s in sentinels] == [
        (1, SENTINEL_PW, 1.5), (2, SENTINEL_PW, 1.5)]
    assert all(s.get("client_name") is None for s in sentinels)  # CLIENT LIST names the master's connections only


async def test_every_connection_of_a_client_names_the_library_from_one_lookup_made_with_the_client() -> None:
    # A burst opens dozens of connections at once; each one reading the package's metadata again was a visible share
    # of a fleet replica's CPU. The connections still tell Redis who they are (CLIENT SETINFO, from Redis 7.2).
    client = redis_client(REDIS_URL, client_name="botgateway:lib")
    try:
        info = client.connection_pool.connection_kwargs["driver_info"]
        assert info.name == "redis-py" and info.lib_version == importlib.metadata.version("redis")
        await asyncio.gather(*(client.blpop(["botgateway:test:nothing"], timeout=0.05) for _ in range(4)))
        pool = client.connection_pool
        connections = [*pool._available_connections, *pool._in_use_connections]
        assert connections and all(conn.driver_info is info for conn in connections)
    finally:
        await client.aclose()


def test_a_bad_url_is_refused_before_any_connection() -> None:
    with pytest.raises(ValueError, match="no service name"):
        redis_client(f"redis+sentinel://:{MASTER_PW}@127.0.0.1:26379")


# --- masking ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        (f"redis://:{MASTER_PW}@h:6379/0", "redis://:***@h:6379/0"),
        (f"rediss://app:{MASTER_PW}@h/0", "rediss://app:***@h/0"),
        (f"unix://:{MASTER_PW}@/run/redis.sock", "unix://:***@/run/redis.sock"),
        (f"redis+sentinel://:{MASTER_PW}@s0:26379,s1:26379/mymaster/1?sentinel_password={SENTINEL_PW}",
         "redis+sentinel://:***@s0:26379,s1:26379/mymaster/1?sentinel_password=***"),
        (f"rediss+sentinel://s0/m?ssl_ca_certs=/ca.pem&sentinel_password={SENTINEL_PW}",
         "rediss+sentinel://s0/m?ssl_ca_certs=/ca.pem&sentinel_password=***"),
        (f"redis://:{MASTER_PW}@1@h:6379/0", "redis://:***@h:6379/0"),  # an unescaped @ in the password
        (f"redis://:{MASTER_PW}/x@h/0", "redis://:***@h/0"),  # an unescaped / in it
    ],
)
def test_mask_url_hides_every_password_of_every_form(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_mask_url_never_raises_on_text_that_is_no_url() -> None:
    assert mask_url(f"{MASTER_PW}@h:6379") == "***"
    assert mask_url("redis://[::1") == "redis://[::1"


# --- log lines ---------------------------------------------------------------------------------


def test_redact_text_masks_sentinel_urls_in_any_text() -> None:
    text = (f"cannot reach redis+sentinel://app:{MASTER_PW}@s0:26379,s1:26379/mymaster"
            f"?sentinel_password={SENTINEL_PW}: No master found")
    redacted = redact_text(text)
    assert MASTER_PW not in redacted and SENTINEL_PW not in redacted
    assert "redis+sentinel://app:***@s0:26379,s1:26379/mymaster" in redacted


def test_the_configured_sentinel_passwords_are_masked_wherever_they_appear_in_a_log_line() -> None:
    url = (f"redis+sentinel://:{MASTER_PW.replace('-', '%2D')}@s0,s1/mymaster"
           f"?sentinel_password={SENTINEL_PW.replace('-', '%2D')}")
    config = parse_config({"memory": {"store": "redis", "redis_url": url}}, {})
    secrets = set(secret_values(config))
    assert {MASTER_PW, SENTINEL_PW, MASTER_PW.replace("-", "%2D"), SENTINEL_PW.replace("-", "%2D")} <= secrets
    assert not any(value.startswith("redis") for value in secrets)  # the hosts stay readable

    redact = RedactSecrets(secrets)
    with capture_logs(processors=[redact]) as logs:
        structlog.get_logger("t").warning("store.down", detail=f"AUTH {SENTINEL_PW} refused by {MASTER_PW}")
    assert MASTER_PW not in json.dumps(logs) and SENTINEL_PW not in json.dumps(logs)
