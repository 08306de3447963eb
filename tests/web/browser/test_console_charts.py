"""A chart in the console, in headless Chromium: the card shows it inline below the answer, loaded from the gateway,
sized to the card with its aspect kept, its figures as the image's words; the dark theme (the header's switch, or
the system's preference) shows the dark drawing. Screenshots are kept in the test's temporary folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chart_fixtures import CHART_FIGURES, probe_spec
from tests.web.chart_gateway import LEAD, PASSWORD, chart_gateway, chart_model

LOADED = """() => {
  const img = document.querySelector(".card .chart img.chart-light");
  return document.querySelector('.card[data-status="done"]') !== null && img !== null && img.complete
    && img.naturalWidth > 0;
}"""

# What the card shows of its chart: each image's state, size and place, and the top-left pixel of the one shown.
SHOWN = """async () => {
  const card = document.querySelector(".card");
  const figure = card.querySelector(".chart");
  const images = [...card.querySelectorAll(".chart img")];
  const style = getComputedStyle(card);
  const inner = card.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const visible = images.filter((img) => getComputedStyle(img).display !== "none");
  const describe = async (img) => {
    if (!img.complete) await new Promise((done) => img.addEventListener("load", done, { once: true }));
    const box = img.getBoundingClientRect();
    const canvas = document.createElement("canvas");
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext("2d");
    context.drawImage(img, 0, 0);
    const [r, g, b] = context.getImageData(2, 2, 1, 1).data;
    return { theme: img.className, path: new URL(img.currentSrc).pathname, query: new URL(img.currentSrc).search,
             origin: new URL(img.currentSrc).origin, naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight,
             width: box.width, height: box.height, alt: img.alt, corner: (r + g + b) / 3 };
  };
  return {
    visible: await Promise.all(visible.map(describe)),
    count: images.length,
    inner,
    figureWidth: figure.getBoundingClientRect().width,
    overflow: card.scrollWidth - card.clientWidth,
    pageOverflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    answer: card.querySelector(".answer").textContent,
    below: figure.compareDocumentPosition(card.querySelector(".answer")) === Node.DOCUMENT_POSITION_PRECEDING,
    images: [...document.querySelectorAll("img")].map((img) => img.src),
  };
}"""


def assert_fits(shown: dict[str, Any], origin: str) -> dict[str, Any]:
    """The one image shown: the chart's own, loaded from the gateway, inside the card, its aspect kept."""
    spec = probe_spec()
    [image] = shown["visible"]
    assert image["origin"] == origin and image["path"].startswith("/console/artifacts/chart-")
    assert (image["naturalWidth"], image["naturalHeight"]) == (spec.width, spec.height)
    assert 0 < image["width"] <= shown["inner"] + 0.5 and shown["figureWidth"] <= shown["inner"] + 0.5
    assert image["width"] < spec.width  # this card is narrower than the drawing: it was scaled down to fit
    assert abs(image["width"] / image["height"] - spec.width / spec.height) < 0.02
    assert shown["overflow"] <= 0 and shown["pageOverflow"] <= 0
    assert image["alt"] == CHART_FIGURES
    assert all(src.startswith(f"{origin}/console/artifacts/") for src in shown["images"])  # no other image
    return image


async def test_the_console_shows_the_chart_inline_sized_to_the_card_in_the_theme_shown(
    browser: Any, tmp_path: Path
) -> None:
    async with chart_model() as llm, chart_gateway(tmp_path / "gateway", llm.base_url) as url:
        # A narrow window: the card is narrower than the 800-pixel drawing.
        context = await browser.new_context(locale="en-US", viewport={"width": 760, "height": 900},
                                            color_scheme="light")
        page = await context.new_page()
        await page.goto(f"{url}/login")
        await page.fill("#secret", PASSWORD)
        await page.click("#login-submit")
        await page.wait_for_url(f"{url}/")
        await page.fill("#question", "how is prod-db-01 doing?")
        await page.press("#question", "Enter")
        await page.wait_for_function(LOADED, timeout=30_000)
        await page.screenshot(path=str(tmp_path / "console-chart-light.png"), full_page=True)

        light = await page.evaluate(SHOWN)
        assert LEAD in light["answer"] and CHART_FIGURES in light["answer"]
        assert light["below"] and light["count"] == 2  # below the answer; both drawings, one shown
        image = assert_fits(light, url)
        assert image["theme"] == "chart-light" and image["query"] == "" and image["corner"] > 200

        await page.click("#theme-toggle")  # the header's switch: dark
        dark = await page.evaluate(SHOWN)
        await page.screenshot(path=str(tmp_path / "console-chart-dark.png"), full_page=True)
        image = assert_fits(dark, url)
        assert image["theme"] == "chart-dark" and image["query"] == "?theme=dark" and image["corner"] < 80

        # No choice made in the console: the system's preference decides.
        await page.evaluate("() => { localStorage.removeItem('botgateway.theme'); "
                            "delete document.documentElement.dataset.theme; }")
        await page.emulate_media(color_scheme="dark")
        assert assert_fits(await page.evaluate(SHOWN), url)["theme"] == "chart-dark"
        await page.emulate_media(color_scheme="light")
        assert assert_fits(await page.evaluate(SHOWN), url)["theme"] == "chart-light"
        await context.close()
    assert (tmp_path / "console-chart-light.png").stat().st_size > 0
