"""``botgateway tools list`` / ``tools call`` as an operator runs them: a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from botgateway.cli.tools import ArgumentSyntaxError, parse_args
from tests.fakes.clouds import FakeAliyun, aliyun_instance
from tests.paths import REPO

ROOT = REPO


def botgateway(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_CLOUD_", "LLM_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "botgateway.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def aliyun() -> Iterator[FakeAliyun]:
    with FakeAliyun({"cn-hangzhou": [aliyun_instance("i-bp1cli000000000001", "hz-cache-01", "172.16.9.9")]}) as fake:
        yield fake  # type: ignore[misc]


def write_config(path: Path, fake: FakeAliyun | None = None, **tools: object) -> Path:
    """A config file with the sample inventory, the fake Aliyun when given, and ``tools`` sections as-is."""
    section: dict[str, object] = {"inventory": {"enabled": True, "path": str(ROOT / "tools" / "sample_inventory.yaml")}}
    if fake is not None:
        section["aliyun"] = {
            "enabled": True,
            "accounts": [{"name": "prod", "access_key_id": "test-key-id", "access_key_secret": "cli-SECRET", "regions": ["cn-hangzhou"], "endpoint": fake.endpoint}],
        }
    section.update(tools)
    config = path / "config.yaml"
    config.write_text(yaml.safe_dump({"llm": {"provider": "demo"}, "tools": section}))
    return config


def test_malformed_ip_without_aliyun_names_the_bad_ip_and_the_missing_provider(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    run = botgateway("tools", "call", "search_ecs_by_ip", "--arg", "ip=not-an-ip", "-c", str(config), cwd=tmp_path)
    assert run.returncode == 1
    assert "invalid arguments: ip: 'not-an-ip' is not a valid IPv4 or IPv6 address" in run.stderr
    assert "search_ecs_by_ip is not available: the aliyun provider is not configured" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_valid_ip_without_aliyun_says_the_tool_is_not_available(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    run = botgateway("tools", "call", "search_ecs_by_ip", "--arg", "ip=10.0.1.100", "-c", str(config), cwd=tmp_path)
    assert run.returncode == 2
    assert "search_ecs_by_ip is not available: the aliyun provider is not configured" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_malformed_ip_with_aliyun_prints_the_validation_error(tmp_path: Path, aliyun: FakeAliyun) -> None:
    config = write_config(tmp_path, aliyun)
    run = botgateway("tools", "call", "search_ecs_by_ip", "--arg", "ip=not-an-ip", "-c", str(config), cwd=tmp_path)
    assert run.returncode == 1
    assert "search_ecs_by_ip failed: invalid arguments: ip: 'not-an-ip' is not a valid IPv4 or IPv6 address" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert aliyun.calls() == []


def test_a_lookup_prints_the_result(tmp_path: Path, aliyun: FakeAliyun) -> None:
    config = write_config(tmp_path, aliyun)
    run = botgateway("tools", "call", "search_ecs_by_ip", "--arg", "ip=172.16.9.9", "-c", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "search_ecs_by_ip: 1 instance found:" in run.stdout
    assert "hz-cache-01 [i-bp1cli000000000001]" in run.stdout
    assert "cli-SECRET" not in run.stdout + run.stderr

    listed = botgateway("tools", "call", "list_servers", "--arg", "status=stopped", "--arg", "limit=2", "-c", str(config), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "showing the first 2" in listed.stdout  # limit parsed as JSON (an integer)


def test_tools_list_shows_offered_and_unavailable_tools(tmp_path: Path, aliyun: FakeAliyun) -> None:
    config = write_config(tmp_path, aliyun)
    run = botgateway("tools", "list", "-c", str(config), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for name in ("search_inventory_by_ip", "search_ecs_by_ip", "find_server", "list_servers"):
        assert name in run.stdout
    assert "Server providers: inventory, aliyun" in run.stdout
    assert "search_cvm_by_ip is not available" in run.stdout


def test_usage_and_config_errors_are_plain_words(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    bad_arg = botgateway("tools", "call", "find_server", "--arg", "no-equals-sign", "-c", str(config), cwd=tmp_path)
    assert bad_arg.returncode == 2 and "--arg expects KEY=VALUE, got 'no-equals-sign'" in bad_arg.stderr
    unknown = botgateway("tools", "call", "reboot_everything", "-c", str(config), cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown tool 'reboot_everything'" in unknown.stderr

    broken = write_config(tmp_path, None, aliyun={"enabled": True, "accounts": [{"name": "prod"}]})
    run = botgateway("tools", "list", "-c", str(broken), cwd=tmp_path)
    assert run.returncode == 1
    assert "tools.aliyun.accounts[0].regions: list the regions to search" in run.stderr
    assert "Traceback" not in run.stderr


def test_parse_args_takes_json_when_it_parses() -> None:
    assert parse_args(["ip=10.0.1.100", "limit=5", "name=null", "tags=[1,2]", "q=a=b"]) == {
        "ip": "10.0.1.100", "limit": 5, "name": None, "tags": [1, 2], "q": "a=b",
    }
    with pytest.raises(ArgumentSyntaxError):
        parse_args(["=x"])


def test_mcp_tools_can_be_listed_and_called(tmp_path: Path) -> None:
    fake = str(ROOT / "tests" / "fakes" / "mcp_server.py")
    config = write_config(
        tmp_path,
        None,
        mcp=[
            {"name": "ops", "command": sys.executable, "args": [fake, "stdio"], "deny": ["drop_database"]},
            {"name": "gone", "command": "/nonexistent/mcp-server"},
        ],
    )
    listed = botgateway("tools", "list", "-c", str(config), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "ops__disk_usage" in listed.stdout and "ops__drop_database" not in listed.stdout
    assert "warning: MCP server 'gone' is unavailable: command not found: /nonexistent/mcp-server" in listed.stderr

    called = botgateway("tools", "call", "ops__add", "--arg", "a=2", "--arg", "b=40", "-c", str(config), cwd=tmp_path)
    assert called.returncode == 0, called.stderr
    assert called.stdout.splitlines()[-1] == "42"
