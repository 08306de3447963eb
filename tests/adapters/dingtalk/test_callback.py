"""HTTP callback mode (outgoing robot): signature, clock-skew and replay checks on a real aiohttp server and a real Store."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from adapters.dingtalk.callback import MAX_SKEW_S, CallbackServer, SignatureError, sign, verify_signature
from botgateway.config import DingTalkConfig
from botgateway.stores.sqlite import SqliteStore
from tests.adapters.log_lines import captured_log
from tests.fakes.dingtalk import bot_message
from tests.fakes.dingtalk_env import GROUP
from tests.ports import free_port
from tools.demo.script import Script

SECRET = "callback-app-secret"


def test_sign_matches_the_documented_algorithm():
    timestamp = "1700000000000"
    expected = base64.b64encode(hmac.new(SECRET.encode(), f"{timestamp}\n{SECRET}".encode(), hashlib.sha256).digest()).decode()
    assert sign(timestamp, SECRET) == expected


@pytest.mark.parametrize(
    ("timestamp", "signature", "reason"),
    [
        (None, "x", "missing"),
        ("1700000000000", None, "missing"),
        ("yesterday", "x", "milliseconds"),
        ("1700000000000", "bm90IHRoZSBzaWdu", "does not match"),
        (str(1700000000000 - 3601_000), sign(str(1700000000000 - 3601_000), SECRET), "away from our clock"),
        (str(1700000000000 + 3601_000), sign(str(1700000000000 + 3601_000), SECRET), "away from our clock"),
    ],
)
def test_bad_signatures_are_rejected_with_a_reason(timestamp, signature, reason):
    with pytest.raises(SignatureError, match=reason) as info:
        verify_signature(timestamp, signature, SECRET, now_s=1_700_000_000)
    assert SECRET not in str(info.value)


def test_a_valid_signature_within_the_configured_skew_passes():
    stamp = str(1700000000000 - 3599_000)
    verify_signature(stamp, sign(stamp, SECRET), SECRET, now_s=1_700_000_000, max_skew_s=3600)


def test_the_default_skew_is_a_few_minutes_not_an_hour():
    assert 60 <= DingTalkConfig().callback_max_skew_s <= 600
    assert MAX_SKEW_S == DingTalkConfig().callback_max_skew_s
    stamp = str(1700000000000 - 10 * 60_000)  # ten minutes old: inside the old hour, outside the default
    with pytest.raises(SignatureError, match="away from our clock"):
        verify_signature(stamp, sign(stamp, SECRET), SECRET, now_s=1_700_000_000)


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[SqliteStore]:
    db = SqliteStore(tmp_path / "replay.db")
    await db.open()
    yield db
    await db.close()


async def _start(store: SqliteStore, received: list[dict[str, Any]], arrived: asyncio.Event, **options: Any) -> CallbackServer:
    async def on_message(payload: dict[str, Any]) -> None:
        received.append(payload)
        arrived.set()

    async def first_use(key: str) -> bool:
        return await store.claim(f"dingtalk:{key}", 2 * options.get("max_skew_s", MAX_SKEW_S))

    srv = CallbackServer(secret=SECRET, on_message=on_message, first_use=first_use, host="127.0.0.1", port=0, **options)
    await srv.start()
    return srv


@pytest.fixture
async def server(store):
    received: list[dict[str, Any]] = []
    arrived = asyncio.Event()
    srv = await _start(store, received, arrived)
    async with aiohttp.ClientSession() as session:
        yield srv.url, session, received, arrived
    await srv.stop()


async def _post(session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: Any) -> tuple[int, dict]:
    async with session.post(url, data=json.dumps(body), headers=headers) as resp:
        return resp.status, await resp.json()


async def test_valid_callback_is_accepted_and_handed_over(server):
    url, session, received, arrived = server
    stamp = str(int(time.time() * 1000))
    payload = bot_message("哪台是 10.0.1.100？", msg_id="msg-http-1")
    status, body = await _post(session, url, {"timestamp": stamp, "sign": sign(stamp, SECRET)}, payload)
    assert status == 200 and body == {}
    await asyncio.wait_for(arrived.wait(), 5)
    assert received[0]["msgId"] == "msg-http-1"


async def test_invalid_and_skewed_callbacks_are_rejected_before_the_body_is_used(server):
    url, session, received, _ = server
    payload = bot_message("hi")
    stamp = str(int(time.time() * 1000))
    status, body = await _post(session, url, {"timestamp": stamp, "sign": sign(stamp, "another-secret")}, payload)
    assert status == 401 and "does not match" in body["errmsg"]
    old = str(int((time.time() - 2 * 3600) * 1000))
    status, body = await _post(session, url, {"timestamp": old, "sign": sign(old, SECRET)}, payload)
    assert status == 401 and "clock" in body["errmsg"]
    status, _ = await _post(session, url, {}, payload)
    assert status == 401
    assert received == []


async def test_a_signed_pair_is_accepted_once_and_a_replay_with_another_body_is_refused(server, store):
    url, session, received, arrived = server
    stamp = str(int(time.time() * 1000))
    headers = {"timestamp": stamp, "sign": sign(stamp, SECRET)}
    with captured_log() as log:
        status, _ = await _post(session, url, headers, bot_message("真的问题", msg_id="msgReal"))
        assert status == 200
        mark = log.mark()
        status, body = await _post(session, url, headers, bot_message("伪造的问题", msg_id="msgForged"))
        assert status == 401 and "already" in body["errmsg"] and "Traceback" not in str(body)
        [warning] = log.problems(mark)
        assert warning["event"] == "dingtalk.callback_rejected" and "exception" not in warning
        assert SECRET not in str(log.since()) and headers["sign"] not in str(log.since())
    await asyncio.wait_for(arrived.wait(), 5)
    assert [p["msgId"] for p in received] == ["msgReal"]

    # another replica on the same Store refuses the pair too
    elsewhere: list[dict[str, Any]] = []
    replica = await _start(store, elsewhere, asyncio.Event())
    try:
        status, _ = await _post(session, replica.url, headers, bot_message("再试一次", msg_id="msgAgain"))
        assert status == 401 and elsewhere == []
    finally:
        await replica.stop()


async def test_a_timestamp_older_than_the_configured_skew_is_refused(store):
    received: list[dict[str, Any]] = []
    srv = await _start(store, received, asyncio.Event(), max_skew_s=60)
    try:
        async with aiohttp.ClientSession() as session:
            old = str(int((time.time() - 120) * 1000))
            status, body = await _post(session, srv.url, {"timestamp": old, "sign": sign(old, SECRET)}, bot_message("hi"))
            assert status == 401 and "at most 60 s" in body["errmsg"]
            fresh = str(int(time.time() * 1000))
            status, _ = await _post(session, srv.url, {"timestamp": fresh, "sign": sign(fresh, SECRET)}, bot_message("hi"))
            assert status == 200
    finally:
        await srv.stop()
    assert len(received) == 1


async def test_a_port_in_use_fails_the_start_with_a_plain_reason(server):
    url, *_ = server
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])

    async def ignore(payload: dict[str, Any]) -> None:
        pass

    async def always_first(key: str) -> bool:
        return True

    second = CallbackServer(secret=SECRET, on_message=ignore, first_use=always_first, host="127.0.0.1", port=port)
    with pytest.raises(ValueError, match="http_port") as info:
        await second.start()
    assert "Traceback" not in str(info.value) and str(port) in str(info.value)
    await second.stop()  # closing after a failed start is harmless


async def test_replicas_of_the_adapter_share_the_replay_cache_through_the_store(make_env):
    fake = await make_env.fake()
    ports = [free_port(), free_port()]
    first = await make_env(fake=fake, db="shared.db", card_template_id="", mode="http", http_host="127.0.0.1", http_port=ports[0])
    second = await make_env(fake=fake, db="shared.db", card_template_id="", mode="http", http_host="127.0.0.1", http_port=ports[1])
    first.llm_server.enqueue(Script.text("真的回答。"))
    stamp = str(int(time.time() * 1000))
    headers = {"timestamp": stamp, "sign": sign(stamp, fake.client_secret)}
    webhook = fake.session_webhook(GROUP)
    async with aiohttp.ClientSession() as session:
        real = bot_message("真的问题", msg_id="msgReal", webhook=webhook, conversation_id=GROUP)
        status, _ = await _post(session, first.adapter.callback_server.url, headers, real)
        assert status == 200
        for env in (first, second):  # the same pair, another body, at either replica
            forged = bot_message("伪造的问题", msg_id="msgForged", webhook=webhook, conversation_id=GROUP)
            status, body = await _post(session, env.adapter.callback_server.url, headers, forged)
            assert status == 401 and "already" in body["errmsg"]
    await first.finished("msgReal")
    await second.adapter.drain()
    assert [m for m, _ in first.adapter.submissions] == ["msgReal"] and second.adapter.submissions == deque()
    assert len(first.llm_server.requests) == 1 and second.llm_server.requests == []


async def test_a_skew_longer_than_the_replay_cache_remembers_fails_the_start():
    from types import SimpleNamespace

    from adapters.dingtalk import DingTalkAdapter
    from botgateway.config import parse_config

    config = parse_config({
        "memory": {"dedupe_ttl_s": 600},
        "adapters": {"dingtalk": {"mode": "http", "client_id": "id", "client_secret": "s", "callback_max_skew_s": 400}},
    }, env={})
    adapter = DingTalkAdapter(config.adapters.dingtalk)
    with pytest.raises(ValueError, match=r"callback_max_skew_s .* at most half of memory.dedupe_ttl_s"):
        await adapter.start(SimpleNamespace(config=config))  # type: ignore[arg-type]
    await adapter.stop()
