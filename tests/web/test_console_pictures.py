"""The console's side of a chart, over HTTP: the card's snapshots describe the turn's pictures (never their pixels),
and ``/console/artifacts/`` serves each, light and dark, to the session that asked the turn only; another session,
no session, an unknown reference are refused without a traceback. A failed picture's snapshot carries its line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import aiohttp
from PIL import Image

from adapters.web.snapshots import snapshot_to_dict
from botgateway.artifacts import Artifact, ArtifactView
from botgateway.snapshot import CardSnapshot
from tests.chart_fixtures import CHART_FIGURES, CHART_TITLE, probe_spec
from tests.web.api_harness import sse_events
from tests.web.chart_gateway import PASSWORD, VIEWER_KEY, chart_gateway, chart_model


def client() -> aiohttp.ClientSession:
    """A browser-like client: it keeps the session cookie (of a loopback address too)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def login(http: aiohttp.ClientSession, url: str, **body: str) -> str:
    """Log in; returns the session's CSRF token."""
    async with http.post(f"{url}/login", json=body) as response:
        assert response.status == 200, await response.text()
        return str((await response.json())["csrf"])


async def final_snapshot(http: aiohttp.ClientSession, url: str, csrf: str) -> dict[str, Any]:
    """Ask as the console asks, and return the card's final snapshot."""
    body = {"question": "how is prod-db-01 doing?", "snapshots": True}
    async with http.post(f"{url}/v1/turns", json=body, headers={"X-CSRF-Token": csrf}) as response:
        assert response.status == 200
        async for event, data in sse_events(response):
            if event == "snapshot" and data["final"]:
                return data
    raise AssertionError("no final snapshot")


async def png_of(http: aiohttp.ClientSession, url: str) -> Image.Image:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "image/png" and "private" in response.headers["Cache-Control"]
        image = Image.open(io.BytesIO(await response.read()))
        image.load()
        return image


def brightness(image: Image.Image) -> float:
    """The mean of the top-left pixel's channels: the chart's background."""
    r, g, b = image.convert("RGB").getpixel((2, 2))  # type: ignore[misc]
    return (r + g + b) / 3


async def status_of(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url) as response:
        assert "error" in await response.json()  # the console's JSON error, never a traceback
        return response.status


async def test_a_turns_pictures_are_served_to_the_session_that_asked_only(tmp_path: Path) -> None:
    async with chart_model() as llm, chart_gateway(tmp_path, llm.base_url) as url:
        async with client() as admin, client() as other, client() as nobody:
            snapshot = await final_snapshot(admin, url, await login(admin, url, password=PASSWORD))
            assert CHART_FIGURES in snapshot["answer"]
            [picture] = snapshot["artifacts"]
            spec = probe_spec()
            assert {k: picture[k] for k in ("title", "alt", "width", "height", "state", "error", "note")} == {
                "title": CHART_TITLE, "alt": CHART_FIGURES, "width": spec.width, "height": spec.height,
                "state": "shown", "error": "", "note": ""}
            assert picture["url"] == f"/console/artifacts/{picture['ref']}.png"
            assert picture["dark_url"] == f"{picture['url']}?theme=dark"

            light = await png_of(admin, url + picture["url"])
            dark = await png_of(admin, url + picture["dark_url"])
            assert light.size == dark.size == (spec.width, spec.height)
            assert brightness(light) > 200 > 80 > brightness(dark)

            await login(other, url, key=VIEWER_KEY)
            assert await status_of(other, url + picture["url"]) == 404  # another session: not its turn
            assert await status_of(nobody, url + picture["url"]) == 401  # no session
            assert await status_of(admin, f"{url}/console/artifacts/chart-0123456789abcdef.png") == 404
            assert await status_of(admin, f"{url}/console/artifacts/{picture['ref']}.svg") == 404


def test_a_snapshot_describes_its_pictures_without_pixels_and_a_failed_one_with_its_line() -> None:
    chart = Artifact(ref="chart-0a1b2c3d4e5f6071", title="disk  of\nprod-db-01", png=b"\x89PNG" * 5000, width=800,
                     height=400, alt="disk 91 %", dark_png=b"\x89PNG" * 5000)
    shown = ArtifactView(artifact=chart, state="shown", embed="/console/artifacts/chart-0a1b2c3d4e5f6071.png")
    failed = ArtifactView(artifact=Artifact(ref="chart-ffff", title="cpu", png=b"x", width=8, height=4),
                          state="failed", error="the picture is too large to keep")
    data = snapshot_to_dict(CardSnapshot(status="done", answer="ok", artifacts=(shown, failed)), "t1")
    text = json.dumps(data)  # plain JSON: no bytes
    assert "PNG" not in text
    first, second = data["artifacts"]
    assert (first["title"], first["url"], first["dark_url"]) == (
        "disk of prod-db-01", shown.embed, f"{shown.embed}?theme=dark")
    assert (second["state"], second["url"], second["error"]) == ("failed", "", "the picture is too large to keep")
    assert second["note"] == "📈 The chart “cpu” could not be shown: the picture is too large to keep."
