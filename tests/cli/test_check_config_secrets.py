"""``botgateway check-config`` never echoes a value a secret may hide in: it names the key and what is wrong."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.cli_process import run_cli


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("check-config", "-c", str(path), cwd=path.parent)


def test_bad_mcp_values_are_named_by_their_path_never_echoed(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "tools:\n"
        "  inventory: {enabled: false}\n"
        "  mcp:\n"
        "    - name: list\n"
        "      command: mcp-server\n"
        "      args: [424242424242, {x: 1}, [--token=sk-live-inlist01], --ok, true]\n"
        "    - name: text\n"
        "      command: mcp-server\n"
        "      args: --api-token=sk-live-astext02\n"
        "    - name: number\n"
        "      command: 313131313131\n"
        "    - name: env\n"
        "      command: mcp-server\n"
        "      env: API_TOKEN=sk-live-envtext03\n"
        "    - name: headers\n"
        "      url: http://127.0.0.1:1/mcp\n"
        "      headers: {Authorization: [Bearer sk-live-header04], X-Pin: 575757575757}\n",
        encoding="utf-8",
    )
    run = check_config(path)
    output = run.stdout + run.stderr
    assert run.returncode == 1 and "Traceback" not in output
    for where in (
        "tools.mcp[0].args[0]: Input should be a valid string",
        "tools.mcp[0].args[1]:",
        "tools.mcp[0].args[2]:",
        "tools.mcp[0].args[4]:",
        "tools.mcp[1].args: Input should be a valid list",
        "tools.mcp[2].command: Input should be a valid string",
        "tools.mcp[3].env: Input should be a valid dictionary",
        "tools.mcp[4].headers.Authorization:",
        "tools.mcp[4].headers.X-Pin:",
    ):
        assert where in output
    for secret in ("sk-live", "424242424242", "313131313131", "575757575757", "True"):
        assert secret not in output


def test_a_command_not_on_path_is_named_only_when_it_cannot_hold_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "tools:\n"
        "  inventory: {enabled: false}\n"
        "  mcp:\n"
        "    - {name: words, command: run-mcp-xyz --api-token=sk-live-abc123456}\n"
        "    - {name: token, command: sk-live-def123456789}\n"
        "    - {name: opaque, command: ghp_0123456789abcdefghijKLMNOP}\n"
        "    - {name: assigned, command: TOKEN=hunter2hunter2}\n"
        "    - {name: plain, command: /nonexistent/bin/mcp-server}\n",
        encoding="utf-8",
    )
    run = check_config(path)
    output = run.stdout + run.stderr
    assert run.returncode == 1 and "Traceback" not in output
    assert (
        "tools.mcp[0].command: the command is not an executable on PATH: it holds more than the program's name"
        " ('run-mcp-xyz'); put the arguments in tools.mcp[0].args"
    ) in output
    for i in (1, 2, 3):
        assert f"tools.mcp[{i}].command: the command is not an executable on PATH (not shown: it may hold a secret)" in output
    assert "tools.mcp[4].command: '/nonexistent/bin/mcp-server' is not an executable on PATH" in output
    for secret in ("sk-live", "abc123456", "def123456789", "0123456789abcdefghij", "hunter2"):
        assert secret not in output
