"""Browser tests: headless Chromium from the system's packages (Debian's ``chromium``), driven by Playwright.

Playwright's own browser download cannot reach the network here, so it is
pointed at the system's Chromium with ``executable_path``; ``.ci/run`` installs
the package when it is missing. Without a Chromium the tests skip, saying so.
Screenshots go under ``test-artifacts/browser/`` (ignored by git).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.paths import REPO

ARTIFACTS = REPO / "test-artifacts" / "browser"
"""Where the browser tests leave their screenshots."""


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture
def artifacts() -> Path:
    """The screenshot folder (made on demand)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@asynccontextmanager
async def launched_chromium() -> AsyncIterator[Any]:
    """A headless Chromium (the system's), closed on the way out; skips the test without Playwright or Chromium."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[test]'")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine: apt-get install -y chromium (.ci/run installs it)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless Chromium (the system's), closed after the test."""
    async with launched_chromium() as launched:
        yield launched


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_browser() -> AsyncIterator[Any]:
    """One headless Chromium for all the tests of a module (whose tests run in the module's event loop:
    ``pytestmark = pytest.mark.asyncio(loop_scope="module")``)."""
    async with launched_chromium() as launched:
        yield launched
