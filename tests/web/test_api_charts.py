"""A chart through the OpenAI-compatible API: the answer quotes the figures and ends with an image link to the
gateway, which only the key that asked opens (its header, or the link's signature made with a secret derived from
it); another key, no key, a tampered, foreign or expired signature are refused. The official ``openai`` client asks,
streamed and not, of a gateway in this process whose scripted model calls ``chart_probe``."""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import time
from pathlib import Path

import aiohttp
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam
from PIL import Image

from adapters.web.artifact_links import LINK_PURPOSE, link_signature
from tests.chart_fixtures import CHART_FIGURES, CHART_TITLE, probe_spec
from tests.web.api_harness import bearer
from tests.web.chart_gateway import ADMIN_KEY, LEAD, VIEWER_KEY, chart_gateway, chart_model

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "how is prod-db-01 doing?"}]
LINK = re.compile(r"!\[(?P<title>[^\]]*)\]\((?P<url>(?P<base>http://[^\s)]+/v1/artifacts/(?P<ref>chart-[0-9a-f]+)\.png)"
                  r"\?sig=(?P<sig>[^\s)]+))\)")


def link_in(content: str) -> re.Match[str]:
    """The one image link of an answer, which ends it."""
    links = list(LINK.finditer(content))
    assert len(links) == 1, content
    assert content.rstrip().endswith(links[0].group(0)), content
    return links[0]


def secret_of(key: str) -> bytes:
    """The link secret a key derives (as the gateway derives it)."""
    return hmac.new(key.encode(), LINK_PURPOSE, hashlib.sha256).digest()


async def get_png(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> bytes:
    async with http.get(url, headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "image/png"
        return await response.read()


def assert_chart(png: bytes) -> None:
    spec = probe_spec()
    image = Image.open(io.BytesIO(png))
    image.load()
    assert (image.format, image.size) == ("PNG", (spec.width, spec.height))
    assert len(set(image.convert("RGB").getdata())) > 8  # a drawn chart, not a blank canvas


async def refused(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> int:
    async with http.get(url, headers=headers or {}) as response:
        body = await response.json()
        assert set(body) == {"error"} and body["error"], body  # the API's error shape, never a traceback
        return response.status


async def test_a_whole_answer_has_the_figures_and_a_link_only_the_asking_key_opens(tmp_path: Path) -> None:
    async with chart_model() as llm, chart_gateway(tmp_path, llm.base_url) as url:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key=ADMIN_KEY, max_retries=0)
        completion = await client.chat.completions.create(model="botgateway", messages=QUESTION)
        content = completion.choices[0].message.content or ""
        assert content.startswith(LEAD) and CHART_FIGURES in content
        link = link_in(content)
        assert link["title"] == CHART_TITLE and link["base"].startswith(f"{url}/v1/artifacts/")
        path, ref, sig = link["base"], link["ref"], link["sig"]

        async with aiohttp.ClientSession() as http:
            by_key = await get_png(http, path, bearer(ADMIN_KEY))
            assert_chart(by_key)
            assert await get_png(http, link["url"]) == by_key  # the signature alone, as an <img> loads it

            assert await refused(http, path) == 401  # no key
            assert await refused(http, path, bearer("wrong-key-0123456789abcdef")) == 401  # no such key
            assert await refused(http, path, bearer(VIEWER_KEY)) == 404  # another key: not its picture
            expires, _, mac = sig.partition(".")
            tampered = mac[:-2] + ("AA" if not mac.endswith("AA") else "BB")
            assert await refused(http, f"{path}?sig={expires}.{tampered}") == 401
            assert await refused(http, f"{path}?sig={int(expires) + 3600}.{mac}") == 401  # a longer life, forged
            foreign = link_signature(secret_of(VIEWER_KEY), ref, int(expires))
            assert await refused(http, f"{path}?sig={foreign}") == 401  # signed with another key's secret
            expired = link_signature(secret_of(ADMIN_KEY), ref, int(time.time()) - 5)
            assert await refused(http, f"{path}?sig={expired}") == 401
            assert await get_png(http, f"{path}?sig={link_signature(secret_of(ADMIN_KEY), ref, int(expires))}")
            other = path.replace(ref, "chart-0123456789abcdef")
            assert await refused(http, f"{other}?sig={sig}") == 404  # nothing kept under that reference


async def test_a_streamed_answer_sends_the_link_as_its_last_content_before_the_end(tmp_path: Path) -> None:
    async with chart_model() as llm, chart_gateway(tmp_path, llm.base_url) as url:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key=ADMIN_KEY, max_retries=0)
        stream = await client.chat.completions.create(model="botgateway", messages=QUESTION, stream=True)
        deltas = [chunk.choices[0].delta.content async for chunk in stream
                  if chunk.choices and chunk.choices[0].delta.content]
        content = "".join(deltas)
        assert content.startswith(LEAD) and CHART_FIGURES in content
        link = link_in(deltas[-1])  # the link came alone, after the answer's text
        assert link["title"] == CHART_TITLE and CHART_FIGURES not in deltas[-1]
        async with aiohttp.ClientSession() as http:
            assert_chart(await get_png(http, link["url"]))
