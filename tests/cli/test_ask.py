"""``botgateway ask`` as a real subprocess against the scripted model server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO
from tools.demo.script import Pause, Script, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

INVENTORY = REPO / "tools" / "sample_inventory.yaml"


@pytest.fixture
async def server() -> AsyncIterator[ScriptedLLMServer]:
    async with ScriptedLLMServer() as srv:
        yield srv


def write_config(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        "\n".join(
            [
                "llm:",
                "  provider: custom",
                f"  base_url: {base_url}",
                "  model: scripted-model",
                "  max_retries: 0",
                "memory:",
                f"  sqlite_path: {tmp_path / 'data' / 'ask.db'}",
                "tools:",
                "  inventory:",
                "    enabled: true",
                f"    path: {INVENTORY}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


async def ask(tmp_path: Path, config: Path, *args: str) -> tuple[int, str, str]:
    executable = Path(sys.executable).parent / "botgateway"
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "botgateway.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
    proc = await asyncio.create_subprocess_exec(
        *command, "ask", *args, "-c", str(config),
        cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every stdout line must be JSON


async def test_ask_json_prints_every_event_then_the_result(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(
        Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})], reasoning="Look it up.", text="Checking.", usage=(50, 12)),
        Script.text("10.0.1.100 is prod-db-01.", usage=(80, 9)),
    )
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, server.base_url), "which server is 10.0.1.100?", "--json")
    assert code == 0, stderr
    objects = parse_lines(stdout)
    events, result = objects[:-1], objects[-1]

    kinds = [o["kind"] for o in events]
    assert kinds[0] == "round_started" and kinds[-1] == "turn_done"
    assert {"thought_delta", "answer_delta", "tool_call_started", "tool_call_finished", "usage_reported"} <= set(kinds)
    assert kinds.index("tool_call_started") < kinds.index("tool_call_finished") < kinds.index("round_started", 1)
    times = [o["t"] for o in objects]
    assert all(isinstance(t, (int, float)) for t in times) and times == sorted(times)
    started = next(o for o in events if o["kind"] == "tool_call_started")
    assert started == {"kind": "tool_call_started", "call_id": "call_1", "name": "find_server", "arguments": {"query": "10.0.1.100"}, "t": started["t"]}
    finished = next(o for o in events if o["kind"] == "tool_call_finished")
    assert finished["ok"] is True and finished["call_id"] == "call_1" and finished["summary"]
    assert [o["round"] for o in events if o["kind"] == "round_started"] == [1, 2]

    assert result["kind"] == "result" and result["ok"] is True
    assert result["answer"] == "10.0.1.100 is prod-db-01."
    assert result["usage"] == {"prompt_tokens": 130, "completion_tokens": 21, "total_tokens": 151}
    (call,) = result["tool_calls"]
    assert call["call_id"] == "call_1" and call["name"] == "find_server"
    assert call["arguments"] == {"query": "10.0.1.100"} and call["ok"] is True and call["round"] == 1

    # The real inventory tool ran, and its result went back to the model.
    tool_result = server.requests[1]["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "call_1"
    assert "prod-db-01" in tool_result["content"]


async def test_ask_plain_prints_only_the_answer_on_stdout(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(
        Script.tool_calls([("call_1", "find_server", {"query": "10.0.1.100"})]),
        Script.text("It is prod-db-01."),
    )
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, server.base_url), "which server is 10.0.1.100?")
    assert code == 0, stderr
    assert stdout == "It is prod-db-01.\n"
    assert "find_server" in stderr


async def test_ask_json_failed_turn_exits_1_with_partial_answer(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(Script.text("The answer is cut off here", chunk_size=5).with_options(disconnect_after=3))
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, server.base_url), "question", "--json")
    assert code == 1
    objects = parse_lines(stdout)
    failed, result = objects[-2], objects[-1]
    assert failed["kind"] == "turn_failed" and failed["reason"] == "interrupted"
    assert failed["partial_answer"] == "The answer"[:10]
    assert result["ok"] is False and result["answer"] == failed["partial_answer"]
    assert result["error"]["reason"] == "interrupted"
    assert "Traceback" not in stderr


async def test_ask_unusable_key_exits_1_with_plain_words(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(Script.error(401, "Incorrect API key provided"))
    code, stdout, stderr = await ask(tmp_path, write_config(tmp_path, server.base_url), "question")
    assert code == 1
    assert stdout == ""
    assert "The model service rejected the API key (HTTP 401); check llm.api_key" in stderr
    assert "Traceback" not in stderr


async def test_ask_new_forgets_the_earlier_conversation(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(Script.text("First answer."), Script.text("Follow-up answer."), Script.text("Fresh answer."))
    config = write_config(tmp_path, server.base_url)
    assert (await ask(tmp_path, config, "first"))[0] == 0
    assert (await ask(tmp_path, config, "follow-up"))[0] == 0
    code, stdout, stderr = await ask(tmp_path, config, "fresh", "--new")
    assert code == 0, stderr and stdout == "Fresh answer.\n"
    assert [m["content"] for m in server.requests[1]["messages"][1:]] == ["first", "First answer.", "follow-up"]
    assert [m["content"] for m in server.requests[2]["messages"][1:]] == ["fresh"]


async def test_ask_with_an_unwritable_log_file_says_so_plainly(tmp_path: Path, server: ScriptedLLMServer) -> None:
    config = write_config(tmp_path, server.base_url)
    (tmp_path / "a-folder").mkdir()
    config.write_text(config.read_text(encoding="utf-8") + f"log:\n  file: {tmp_path / 'a-folder'}\n", encoding="utf-8")
    code, stdout, stderr = await ask(tmp_path, config, "question")
    assert code == 1 and stdout == ""
    assert "log.file: cannot write the log file" in stderr
    assert "Traceback" not in stderr
    assert server.requests == []


async def test_ctrl_c_during_ask_json_still_ends_with_a_result_line(tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.enqueue(Script(chunks=[role_chunk(), *text_chunks("Half an answer"), Pause(60), *text_chunks(" never")]))
    executable = Path(sys.executable).parent / "botgateway"
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "botgateway.cli"]
    proc = await asyncio.create_subprocess_exec(
        *command, "ask", "question", "--json", "-c", str(write_config(tmp_path, server.base_url)),
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        # The test runner may ignore SIGINT; the child must get Python's default Ctrl-C handling.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
    )
    assert proc.stdout is not None
    lines: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        while "".join(line.get("text", "") for line in lines if line["kind"] == "answer_delta") != "Half an answer":
            lines.append(json.loads(await proc.stdout.readline()))
        proc.send_signal(signal.SIGINT)
        rest, stderr = await proc.communicate()  # not stuck behind the 60 s pause
    result = json.loads(rest.decode().splitlines()[-1])
    assert proc.returncode == 130
    assert result["kind"] == "result" and result["ok"] is False
    assert result["error"]["reason"] == "cancelled" and result["answer"] == "Half an answer"
    assert "Traceback" not in stderr.decode()


ACCESS = """access:
  default_role: none
  channels: {allow: ["slack:C0OPS"]}
  roles:
    oncall: {members: ["slack:U0ALICE"], tools: ["find_server"]}
"""


async def test_ask_as_a_principal_offers_the_model_only_its_tools_there(tmp_path: Path, server: ScriptedLLMServer) -> None:
    config = write_config(tmp_path, server.base_url)
    config.write_text(config.read_text() + ACCESS, encoding="utf-8")
    server.enqueue(Script.text("Only find_server for you."))
    code, stdout, stderr = await ask(tmp_path, config, "--json", "--as", "slack:U0ALICE", "--channel", "slack:C0OPS", "which server?")
    assert code == 0, stderr
    offered = [tool["function"]["name"] for tool in server.requests[0].get("tools", [])]
    assert offered == ["find_server"]  # not list_servers, not search_inventory_by_ip
    assert parse_lines(stdout)[-1]["ok"] is True


async def test_ask_as_a_refused_principal_says_why_and_never_asks_the_model(tmp_path: Path, server: ScriptedLLMServer) -> None:
    config = write_config(tmp_path, server.base_url)
    config.write_text(config.read_text() + ACCESS, encoding="utf-8")
    code, stdout, _ = await ask(tmp_path, config, "--json", "--as", "slack:U0BOB", "--channel", "slack:C0OPS", "which server?")
    result = parse_lines(stdout)[-1]
    assert code == 1 and result["error"]["reason"] == "refused" and "no role" in result["error"]["message"]
    assert server.requests == []
    code, _, stderr = await ask(tmp_path, config, "--as", "U0BOB", "which server?")
    assert code == 1 and "not a qualified principal" in stderr and "Traceback" not in stderr
