"""HTTP callback mode (outgoing robot): signature and clock-skew checks on a real aiohttp server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from typing import Any

import aiohttp
import pytest

from adapters.dingtalk.callback import CallbackServer, SignatureError, sign, verify_signature
from tests.fakes.dingtalk import bot_message

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


def test_a_valid_signature_within_the_hour_passes():
    stamp = str(1700000000000 - 3599_000)
    verify_signature(stamp, sign(stamp, SECRET), SECRET, now_s=1_700_000_000)


@pytest.fixture
async def server():
    received: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def on_message(payload: dict[str, Any]) -> None:
        received.append(payload)
        arrived.set()

    srv = CallbackServer(secret=SECRET, on_message=on_message, host="127.0.0.1", port=0)
    url = await srv.start()
    async with aiohttp.ClientSession() as session:
        yield url, session, received, arrived
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


async def test_a_port_in_use_fails_the_start_with_a_plain_reason(server):
    url, *_ = server
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])

    async def ignore(payload: dict[str, Any]) -> None:
        pass

    second = CallbackServer(secret=SECRET, on_message=ignore, host="127.0.0.1", port=port)
    with pytest.raises(ValueError, match="http_port") as info:
        await second.start()
    assert "Traceback" not in str(info.value) and str(port) in str(info.value)
    await second.stop()  # closing after a failed start is harmless
