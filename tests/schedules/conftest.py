"""The schedules' tests share one SQLite store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botgateway.stores.sqlite import SqliteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()
