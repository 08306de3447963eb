"""Takes the screenshot the README and the documentation's home page show: the console answering with a chart.

A real ``botgateway run`` (the offline demo model, the sample inventory and its
recorded hour of metrics, no chat platform) serves the console on a free
loopback port with a throwaway admin password; the system's Chromium, driven by
Playwright as the browser tests drive it (``tests/web/browser``), logs in, asks
"how is prod-db-01 doing?", waits for the finished card and its chart, and saves
the page::

    .venv/bin/python docs/screenshot.py            # writes docs/images/console-chart.png
    .venv/bin/python docs/screenshot.py --out /tmp/shot.png --width 1280

Needs the test extra (Playwright) and a Chromium (``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from botgateway.password_hash import hash_password

REPO = Path(__file__).resolve().parent.parent
"""The project root: ``botgateway run`` runs there, so the sample inventory's relative path resolves."""
OUT = REPO / "docs" / "images" / "console-chart.png"
"""Where the screenshot goes by default."""
QUESTION = "how is prod-db-01 doing?"
"""The question asked: the demo answers it with figures and a chart."""
PASSWORD = "screenshot admin password"
"""The console's admin password for this run only."""
START_TIMEOUT_S = 60.0

FINISHED = """() => {
  const card = document.querySelector('.card[data-status="done"]');
  const img = card && card.querySelector(".chart img.chart-light");
  return img !== null && img !== undefined && img.complete && img.naturalWidth > 0;
}"""
"""The card is final and its (light) chart has loaded."""
HIDDEN = """() => {
  const thread = document.getElementById("thread");
  return thread.scrollHeight - thread.clientHeight;
}"""
"""How much of the conversation the thread's own scrolling hides, in pixels."""


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_config(folder: Path, port: int) -> Path:
    """A config for the demo: the console on ``port``, the sample inventory, no chat platform, state in ``folder``."""
    config = {
        "log": {"file": str(folder / "botgateway.log")},
        "llm": {"provider": "demo"},
        "memory": {"store": "sqlite", "sqlite_path": str(folder / "botgateway.db")},
        "adapters": {"terminal": {"enabled": False}, "slack": {"enabled": False}, "dingtalk": {"enabled": False}},
        "http": {"enabled": True, "host": "127.0.0.1", "port": port},
        "web": {"admin_password_hash": hash_password(PASSWORD)},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    """Return once ``url``/readyz answers 200; raise if the gateway exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"botgateway run exited with {process.returncode}; see its log")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)  # polling another process's readiness: there is nothing to await
    raise SystemExit(f"the gateway was not ready within {START_TIMEOUT_S:g} s")


async def shoot(url: str, out: Path, width: int, height: int) -> None:
    """Log in to the console at ``url``, ask :data:`QUESTION`, and save the page once its chart is shown."""
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        raise SystemExit("no Chromium on this machine: apt-get install -y chromium")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            context = await browser.new_context(locale="en-US", color_scheme="light",
                                                viewport={"width": width, "height": height})
            page = await context.new_page()
            await page.goto(f"{url}/login")
            await page.fill("#secret", PASSWORD)
            await page.click("#login-submit")
            await page.wait_for_url(f"{url}/")
            await page.fill("#question", QUESTION)
            await page.press("#question", "Enter")
            await page.wait_for_function(FINISHED, timeout=60_000)
            # The thread scrolls inside the page: grow the window until the whole conversation fits in it.
            hidden = await page.evaluate(HIDDEN)
            if hidden > 0:
                await page.set_viewport_size({"width": width, "height": height + hidden})
                await page.wait_for_function(f"() => ({HIDDEN})() <= 0")
            out.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(out), full_page=True)
        finally:
            await browser.close()


def main() -> None:
    """Run the gateway, take the screenshot, stop the gateway."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to save the PNG (default: {OUT})")
    parser.add_argument("--width", type=int, default=1280, help="the window's width in pixels (default: 1280)")
    parser.add_argument("--height", type=int, default=900, help="the window's height in pixels (default: 900)")
    args = parser.parse_args()
    executable = Path(sys.executable).with_name("botgateway")
    with tempfile.TemporaryDirectory(prefix="botgateway-screenshot-") as folder:
        port = free_port()
        config = write_config(Path(folder), port)
        env = {**os.environ, "BOTGATEWAY_LOG_FORMAT": "json"}
        process = subprocess.Popen([str(executable), "run", "-c", str(config)], cwd=REPO, env=env,
                                   stdin=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, process)
            asyncio.run(shoot(url, args.out, args.width, args.height))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
