"""MCP servers as tools: a real MCP server subprocess over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import structlog

from botgateway.access import Place, decide
from botgateway.backoff import Backoff
from botgateway.config import ConfigError, InventoryConfig, McpServerConfig, ToolsConfig, parse_config
from botgateway.config.access import DEFAULT_ACCESS, RoleConfig
from botgateway.logs import secret_values
from botgateway.principal import Principal
from botgateway.tooling import Tool, ToolContext, ToolRegistry
from tests.paths import FAKES
from tools.catalog import build_toolset
from tools.mcp import McpManager, namespaced_name

FAKE = str(FAKES / "mcp_server.py")
CTX = ToolContext(user_id="U1", platform="cli")


def stdio(name: str = "fake", **overrides: object) -> McpServerConfig:
    return McpServerConfig(name=name, command=sys.executable, args=[FAKE, "stdio"], **overrides)  # type: ignore[arg-type]


def tools_config(*servers: McpServerConfig) -> ToolsConfig:
    return ToolsConfig(inventory=InventoryConfig(enabled=False), mcp=list(servers))


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """The fake MCP server over streamable HTTP, requiring a bearer token; yields its URL."""
    env = {**os.environ, "FAKE_MCP_TOKEN": "s3cret-token"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, FAKE, "http", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    match = re.match(rb"PORT (\d+)", line)
    assert match, line
    try:
        yield f"http://127.0.0.1:{int(match.group(1))}/mcp"
    finally:
        proc.terminate()
        await proc.wait()


async def until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    """Wait until ``condition()`` holds, yielding to the loop between checks; fail after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)


class Arrivals:
    """A tool sink that signals when a tool whose name starts with ``prefix`` is offered."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.arrived = asyncio.Event()

    def add(self, tool: Tool) -> None:
        if tool.name.startswith(self.prefix):
            self.arrived.set()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_stdio_server_tools_are_namespaced_and_run_through_the_registry() -> None:
    config = stdio(env={"FAKE_MCP_GREETING": "hello from config"})
    toolset = await build_toolset(tools_config(config))
    try:
        names = [t.name for t in toolset.tools]
        assert "fake__echo" in names and "fake__add" in names
        assert "fake__ops_status" in names  # the dot is not allowed in a model tool name
        long = [n for n in names if n.startswith("fake__a_really_long")]
        assert len(long) == 1 and len(long[0]) <= 64
        assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names)
        assert toolset.problems == []

        registry = ToolRegistry(toolset.tools)
        spec = next(s for s in registry.specs() if s["function"]["name"] == "fake__add")
        assert spec["function"]["parameters"]["required"] == ["a", "b"]
        assert "[MCP server fake]" in spec["function"]["description"]

        echo = await registry.execute("fake__echo", '{"text": "hi"}', CTX)
        assert echo.ok and echo.content == "echo: hi" and echo.summary == "echo: hi"
        added = await registry.execute("fake__add", {"a": 2, "b": 3}, CTX)
        assert added.ok and added.content == "5"
        greeting = await registry.execute("fake__greeting", {}, CTX)
        assert greeting.content == "hello from config"
        status = await registry.execute("fake__ops_status", {}, CTX)
        assert status.ok and status.content == "all systems nominal"
        assert (await registry.execute(long[0], {}, CTX)).content == "long name ok"

        failed = await registry.execute("fake__fail", {"message": "disk /data is read-only"}, CTX)
        assert not failed.ok and "disk /data is read-only" in failed.content
        # A bad argument is the server's to reject; it comes back as a readable error, not a crash.
        bad = await registry.execute("fake__add", {"a": "two", "b": 3}, CTX)
        assert not bad.ok
    finally:
        await toolset.aclose()


async def test_a_tool_annotated_destructive_and_not_read_only_always_needs_an_approval() -> None:
    toolset = await build_toolset(tools_config(stdio("ops")))
    try:
        registry = ToolRegistry(toolset.tools)
        # disk_usage is annotated destructive too, but read-only wins; unannotated tools need none
        assert registry.approval_required() == {"ops__drop_database"}
        decision = decide(DEFAULT_ACCESS.model_copy(update={"default_role": "ops", "roles": {"ops": RoleConfig(tools=["*"])}}),
                          Principal.of("slack", "U1"), Place(channel="slack:C1"), registry.names,
                          always_approve=registry.approval_required())
        assert decision.grant is not None and decision.grant.approval == {"ops__drop_database"}
    finally:
        await toolset.aclose()


async def test_only_tools_annotated_read_only_are_read_only() -> None:
    toolset = await build_toolset(tools_config(stdio("ops")))
    try:
        registry = ToolRegistry(toolset.tools)
        # readOnlyHint true (even beside destructiveHint) is read-only; false or no annotation is not
        assert registry.read_only_names() == {"ops__disk_usage"}
        assert getattr(registry.get("ops__drop_database"), "read_only", None) is False
        assert getattr(registry.get("ops__echo"), "read_only", None) is False
    finally:
        await toolset.aclose()


async def test_allow_and_deny_lists_filter_offered_tools() -> None:
    toolset = await build_toolset(
        tools_config(
            stdio("ops", deny=["drop_*", "crash"]),
            stdio("ro", allow=["echo", "disk_usage"]),
        )
    )
    try:
        names = {t.name for t in toolset.tools}
        assert "ops__echo" in names and "ops__drop_database" not in names and "ops__crash" not in names
        assert {n for n in names if n.startswith("ro__")} == {"ro__echo", "ro__disk_usage"}
    finally:
        await toolset.aclose()


async def test_a_slow_call_times_out_and_the_server_keeps_working() -> None:
    toolset = await build_toolset(tools_config(stdio(timeout_s=0.5)))
    try:
        registry = ToolRegistry(toolset.tools)
        slow = await asyncio.wait_for(registry.execute("fake__slow", {"seconds": 30}, CTX), 20)
        assert not slow.ok and ("timed out" in slow.content or "did not answer" in slow.content)
        echo = await registry.execute("fake__echo", {"text": "still here"}, CTX)
        assert echo.ok and echo.content == "echo: still here"
    finally:
        await toolset.aclose()


async def test_streamable_http_server_with_headers(http_server: str) -> None:
    config = McpServerConfig(name="remote", url=http_server, headers={"Authorization": "Bearer s3cret-token"})
    toolset = await build_toolset(tools_config(config))
    try:
        registry = ToolRegistry(toolset.tools)
        assert "remote__disk_usage" in registry.names
        out = await registry.execute("remote__disk_usage", {"host": "prod-db-01"}, CTX)
        assert out.ok and out.content.startswith("prod-db-01: / 71% used")
    finally:
        await toolset.aclose()


async def test_one_server_failing_to_start_is_reported_and_the_others_work(http_server: str) -> None:
    toolset = await build_toolset(
        tools_config(
            McpServerConfig(name="badtoken", url=http_server, headers={"Authorization": "Bearer wrong-token"}),
            McpServerConfig(name="missing", command="/nonexistent/bin/mcp-server"),
            stdio("good"),
        ),
        mcp_connect_timeout_s=20,
    )
    try:
        names = [t.name for t in toolset.tools]
        assert "good__echo" in names
        assert not any(n.startswith(("badtoken__", "missing__")) for n in names)
        problems = "\n".join(toolset.problems)
        assert "'badtoken' is unavailable" in problems
        assert "'missing' is unavailable: command not found: /nonexistent/bin/mcp-server" in problems
        assert "wrong-token" not in problems  # header secrets never reach messages
        out = await ToolRegistry(toolset.tools).execute("good__echo", {"text": "ok"}, CTX)
        assert out.ok
    finally:
        await toolset.aclose()


async def test_killed_server_is_restarted_on_the_next_call() -> None:
    manager = McpManager([stdio()])
    await manager.start()
    try:
        registry = ToolRegistry(manager.tools)
        connection = manager.connection("fake")
        assert connection is not None
        first_pid = int((await registry.execute("fake__pid", {}, CTX)).content)
        os.kill(first_pid, signal.SIGKILL)
        await asyncio.wait_for(connection.wait_down(), 20)  # end-of-stream seen: the server is known dead
        assert not connection.connected

        echo = await registry.execute("fake__echo", {"text": "back"}, CTX)
        assert echo.ok and echo.content == "echo: back"
        second_pid = int((await registry.execute("fake__pid", {}, CTX)).content)
        assert second_pid != first_pid
        assert connection.connects == 2
    finally:
        await manager.aclose()


async def test_death_during_a_call_is_a_tool_error_then_the_server_comes_back() -> None:
    manager = McpManager([stdio()])
    await manager.start()
    try:
        registry = ToolRegistry(manager.tools)
        crashed = await asyncio.wait_for(registry.execute("fake__crash", {}, CTX), 20)
        assert not crashed.ok
        assert "'fake' went away during the call" in crashed.content
        echo = await registry.execute("fake__echo", {"text": "again"}, CTX)
        assert echo.ok and echo.content == "echo: again"
    finally:
        await manager.aclose()


async def test_failed_restarts_back_off_and_fail_fast(tmp_path: Path) -> None:
    marker = tmp_path / "refuse"
    clock = FakeClock()
    manager = McpManager(
        [stdio(env={"FAKE_MCP_REFUSE_IF_EXISTS": str(marker)})],
        backoff=Backoff(base_s=30, max_s=300, jitter=(1.0, 1.0)),
        clock=clock,
        connect_timeout_s=20,
    )
    await manager.start()
    try:
        registry = ToolRegistry(manager.tools)
        connection = manager.connection("fake")
        assert connection is not None
        pid = int((await registry.execute("fake__pid", {}, CTX)).content)
        marker.write_text("x")
        os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(connection.wait_down(), 20)

        # The restart attempt fails: a tool error, not a crash, and not a hang.
        first = await asyncio.wait_for(registry.execute("fake__echo", {"text": "a"}, CTX), 30)
        assert not first.ok and "'fake' is unavailable" in first.content and "retrying in 30 s" in first.content
        # Within the back-off no process is spawned: the call fails at once with the same reason.
        second = await asyncio.wait_for(registry.execute("fake__echo", {"text": "b"}, CTX), 5)
        assert not second.ok and "retrying in" in second.content

        marker.unlink()
        clock.now += 31
        third = await asyncio.wait_for(registry.execute("fake__echo", {"text": "c"}, CTX), 30)
        assert third.ok and third.content == "echo: c"
    finally:
        await manager.aclose()


def test_namespaced_names_are_valid_short_and_distinct() -> None:
    assert namespaced_name("k8s", "get_pods") == "k8s__get_pods"
    assert namespaced_name("k8s", "pods.list") == "k8s__pods_list"
    long_a = namespaced_name("grafana", "x" * 80 + "a")
    long_b = namespaced_name("grafana", "x" * 80 + "b")
    assert len(long_a) <= 64 and len(long_b) <= 64 and long_a != long_b
    # Sanitizing must not merge two tools into one name.
    taken = {namespaced_name("s", "a.b")}
    assert namespaced_name("s", "a_b", taken) not in taken


async def test_duplicate_server_names_are_a_config_error() -> None:
    from botgateway.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        await build_toolset(tools_config(stdio("ops"), stdio("ops")))
    assert caught.value.problems == [
        "tools.mcp[1].name: 'ops' is already used by another MCP server (names namespace their tools)"
    ]


# --- servers that are down at start-up ---------------------------------------------------------


async def test_a_server_down_at_start_up_is_retried_and_its_tools_join_the_live_registry(tmp_path: Path) -> None:
    marker = tmp_path / "refuse"
    marker.write_text("x")  # the server exits at once while this file exists
    config = stdio("late", env={"FAKE_MCP_REFUSE_IF_EXISTS": str(marker)}, deny=["drop_*"])
    with structlog.testing.capture_logs() as logs:
        toolset = await build_toolset(
            tools_config(config, stdio("early")),
            mcp_backoff=Backoff(base_s=0.05, max_s=0.2, jitter=(1.0, 1.0)),
            mcp_connect_timeout_s=20,
        )
        try:
            assert any("'late' is unavailable" in p for p in toolset.problems)
            registry = ToolRegistry(toolset.tools)
            toolset.attach(registry)
            late_tools = Arrivals("late__")
            toolset.attach(late_tools)  # offered after the registry, so the registry has them by then
            assert "early__echo" in registry.names
            assert not any(n.startswith("late__") for n in registry.names)
            missing = await registry.execute("late__echo", {"text": "hi"}, CTX)
            assert not missing.ok and "unknown tool" in missing.content

            # Still refused: the background retries keep failing without disturbing the rest.
            assert toolset.mcp is not None and toolset.mcp.retrying == ["late"]
            connection = toolset.mcp.connection("late")
            assert connection is not None
            await until(lambda: connection.retry_delay_s >= 0.2)  # several attempts failed, backing off
            assert (await registry.execute("early__echo", {"text": "ok"}, CTX)).ok

            marker.unlink()
            await asyncio.wait_for(late_tools.arrived.wait(), 30)
            assert "late__echo" in registry.names
            echo = await registry.execute("late__echo", {"text": "late but here"}, CTX)
            assert echo.ok and echo.content == "echo: late but here"
            assert "late__drop_database" not in registry.names  # the deny list applies to late tools too
            assert toolset.get("late__echo") is not None
            assert toolset.mcp.retrying == []

            # A registry attached after the server came up gets its tools at once.
            later = ToolRegistry()
            toolset.attach(later)
            assert {"late__echo", "early__echo"} <= set(later.names)
        finally:
            await toolset.aclose()
    late = [e for e in logs if e["event"] == "mcp.connected_late"]
    assert len(late) == 1 and late[0]["server"] == "late" and "late__echo" in late[0]["tools"]


async def test_closing_stops_the_start_up_retries() -> None:
    missing = McpServerConfig(name="missing", command="/nonexistent/bin/mcp-server")
    manager = McpManager([missing], backoff=Backoff(base_s=30, max_s=60, jitter=(1.0, 1.0)))
    await manager.start()
    assert manager.retrying == ["missing"] and manager.tools == []
    await asyncio.wait_for(manager.aclose(), 10)  # cancels the task sleeping through its back-off
    assert manager.retrying == []


# --- secrets in the server's environment -------------------------------------------------------


async def test_env_values_are_secret_but_reach_the_server() -> None:
    token = "ghp_topsecret0123456789"
    server = {"name": "gh", "command": sys.executable, "args": [FAKE, "stdio"], "env": {"FAKE_MCP_GREETING": token}}
    config = parse_config({"tools": {"mcp": [server]}}, env={})
    shown = (repr(config), str(config), repr(config.tools.mcp[0]), config.model_dump_json(), str(config.model_dump()))
    for text in shown:
        assert token not in text
    assert token in secret_values(config)  # so the log redaction masks it

    # A mistake elsewhere in the same server, and a malformed env value: the problems never show the values.
    bad = {"name": "gh", "command": "x", "timeout_s": 0, "env": {"GITHUB_TOKEN": token, "PIN": 424242424242}}
    with pytest.raises(ConfigError) as caught:
        parse_config({"tools": {"mcp": [bad]}}, env={})
    joined = "\n".join(caught.value.problems)
    assert "tools.mcp[0].timeout_s:" in joined and "tools.mcp[0].env.PIN:" in joined
    assert token not in joined and "424242424242" not in joined

    toolset = await build_toolset(config.tools)
    try:
        greeting = await ToolRegistry(toolset.tools).execute("gh__greeting", {}, CTX)
        assert greeting.ok and greeting.content == token  # the real value is what the process gets
    finally:
        await toolset.aclose()


def test_check_config_never_prints_env_values(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "tools:\n"
        "  mcp:\n"
        "    - name: github\n"
        "      command: github-mcp-server\n"
        "      timeout_s: -1\n"
        "      env:\n"
        "        GITHUB_TOKEN: ghp_never_print_me_42\n"
        "        RETRIES: [1, 2]\n",
        encoding="utf-8",
    )
    script = Path(sys.executable).parent / "botgateway"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "botgateway.cli"]
    result = subprocess.run([*command, "check-config", "-c", str(bad)], capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "tools.mcp[0].timeout_s:" in output and "tools.mcp[0].env.RETRIES:" in output
    assert "ghp_never_print_me_42" not in output and "Traceback" not in output
