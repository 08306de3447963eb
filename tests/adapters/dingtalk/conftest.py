"""The ``make_env`` fixture of the DingTalk adapter tests: environments closed in reverse order after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.dingtalk_env import EnvFactory


@pytest.fixture
async def make_env(tmp_path) -> AsyncIterator[EnvFactory]:
    factory = EnvFactory(tmp_path)
    yield factory
    for close in reversed(factory.closers):
        await close()
