"""``llm.fallbacks`` as the runtime wires them: ``botgateway ask --json`` as a real subprocess, two scripted servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cli.test_ask import INVENTORY, ask, parse_lines
from tools.demo.script import Script
from tools.demo.server import ScriptedLLMServer


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedLLMServer, ScriptedLLMServer]]:
    async with ScriptedLLMServer() as primary, ScriptedLLMServer() as backup:
        yield primary, backup


def write_config(tmp_path: Path, primary: str, backup: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
llm:
  provider: custom
  base_url: {primary}
  model: primary-model
  max_retries: 0
  fallbacks:
    - name: backup
      base_url: {backup}
      model: backup-model
memory:
  sqlite_path: {tmp_path / 'data' / 'ask.db'}
tools:
  inventory:
    enabled: true
    path: {INVENTORY}
""",
        encoding="utf-8",
    )
    return path


async def test_ask_answers_from_the_fallback_and_says_which_model_stood_in(
    tmp_path: Path, servers: tuple[ScriptedLLMServer, ScriptedLLMServer]
) -> None:
    primary, backup = servers
    primary.enqueue(Script.error(503, "overloaded"))
    backup.enqueue(Script.text("10.0.1.100 is prod-db-01."))
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, primary.base_url, backup.base_url), "which?", "--json")
    assert code == 0, stderr
    objects = parse_lines(stdout)
    [answering] = [o for o in objects if o["kind"] == "model_answering"]
    assert {k: answering[k] for k in ("model", "endpoint", "fallback_from")} == {
        "model": "backup-model", "endpoint": "backup", "fallback_from": "primary",
    }
    assert objects[-1]["answer"] == "10.0.1.100 is prod-db-01."
    assert primary.request_count == 1 and backup.requests[0]["model"] == "backup-model"
