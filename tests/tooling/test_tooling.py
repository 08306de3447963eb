"""The tool mechanism: schema from hints and docstring, validation, cache, size cap, permission hook."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import pytest

from botgateway.tooling import ToolContext, ToolError, ToolOutput, ToolRegistry, TTLCache, tool

CTX = ToolContext(user_id="U1", user_name="Ann", platform="slack", conversation_id="c1", chat_id="C1", is_group=True)


def test_schema_comes_from_type_hints_and_the_google_docstring() -> None:
    @tool(timeout_s=7)
    async def find_server(query: str, ctx: ToolContext, limit: int = 5, state: Literal["running", "stopped"] | None = None) -> str:
        """Find servers by IP, name or tag.

        Searches every configured inventory.

        Args:
            query: An IP address, a host name or a tag,
                matched case-insensitively.
            limit: Most results to return.
            state: Only servers in this state.

        Returns:
            A table of servers.
        """
        return ""

    assert find_server.name == "find_server"
    assert find_server.timeout_s == 7
    assert find_server.description == "Find servers by IP, name or tag.\n\nSearches every configured inventory."
    schema = find_server.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert set(schema["properties"]) == {"query", "limit", "state"}  # the context is hidden from the model
    assert schema["properties"]["query"] == {
        "type": "string",
        "description": "An IP address, a host name or a tag, matched case-insensitively.",
    }
    assert schema["properties"]["limit"]["type"] == "integer" and schema["properties"]["limit"]["default"] == 5
    assert schema["properties"]["limit"]["description"] == "Most results to return."
    assert {"enum": ["running", "stopped"], "type": "string"} in schema["properties"]["state"]["anyOf"]
    assert schema["additionalProperties"] is False
    assert "Returns" not in str(schema)


async def test_arguments_are_validated_and_the_context_is_passed() -> None:
    seen: list[tuple[str, int, ToolContext]] = []

    @tool
    async def lookup(ip: str, ctx: ToolContext, limit: int = 5) -> str:
        """Look up an IP.

        Args:
            ip: The address.
            limit: Most results.
        """
        seen.append((ip, limit, ctx))
        return f"{ip} is web-1"

    registry = ToolRegistry([lookup])
    ok = await registry.execute("lookup", '{"ip": "10.0.0.1", "limit": "3"}', CTX)
    assert ok.ok and ok.content == "10.0.0.1 is web-1" and ok.summary == "10.0.0.1 is web-1"
    assert seen == [("10.0.0.1", 3, CTX)]  # "3" coerced to the declared int

    bad = await registry.execute("lookup", {"limit": "lots", "extra": 1}, CTX)
    assert not bad.ok and bad.content.startswith("Error: invalid arguments")
    assert "ip: required" in bad.content and "limit:" in bad.content and "extra: unknown argument" in bad.content
    assert len(seen) == 1  # the function never ran with bad arguments


async def test_sync_tools_run_off_the_event_loop_and_results_are_normalized() -> None:
    threads: list[int] = []

    @tool(summarize=lambda rows: f"{len(rows)} servers found")
    def list_servers() -> list[dict[str, str]]:
        """List servers."""
        threads.append(threading.get_ident())
        return [{"name": "web-1"}, {"name": "数据库-1"}]

    outcome = await ToolRegistry([list_servers]).execute("list_servers", "", CTX)
    assert outcome.ok and outcome.summary == "2 servers found"
    assert outcome.content == '[{"name": "web-1"}, {"name": "数据库-1"}]'
    assert threads and threads[0] != threading.get_ident()


async def test_cache_is_keyed_on_normalized_arguments_and_expires() -> None:
    calls: list[str] = []
    now = [1000.0]  # the cache's clock, moved by hand

    @tool(cache_ttl_s=30, cache_clock=lambda: now[0])
    async def describe(ip: str, verbose: bool = False) -> str:
        """Describe a host.

        Args:
            ip: The address.
            verbose: More detail.
        """
        calls.append(ip)
        return f"{ip} #{len(calls)}"

    registry = ToolRegistry([describe])
    first = await registry.execute("describe", '{"ip": "10.0.0.1"}', CTX)
    # Same call spelled differently: key order, an explicit default, whitespace.
    again = await registry.execute("describe", '{ "verbose": false, "ip": "10.0.0.1" }', CTX)
    other = await registry.execute("describe", '{"ip": "10.0.0.2"}', CTX)
    assert first.content == again.content == "10.0.0.1 #1"
    assert other.content == "10.0.0.2 #2"
    assert calls == ["10.0.0.1", "10.0.0.2"]

    now[0] += 30  # the last moment of the TTL: still served from the cache
    assert (await registry.execute("describe", '{"ip": "10.0.0.1"}', CTX)).content == "10.0.0.1 #1"
    now[0] += 0.5  # past it: asked again
    expired = await registry.execute("describe", '{"ip": "10.0.0.1"}', CTX)
    assert expired.content == "10.0.0.1 #3"
    assert calls == ["10.0.0.1", "10.0.0.2", "10.0.0.1"]


async def test_failures_are_not_cached() -> None:
    attempts: list[int] = []

    @tool(cache_ttl_s=60)
    async def flaky() -> str:
        """Fails once."""
        attempts.append(1)
        if len(attempts) == 1:
            raise ToolError("backend busy")
        return "ok"

    registry = ToolRegistry([flaky])
    assert not (await registry.execute("flaky", "{}", CTX)).ok
    assert (await registry.execute("flaky", "{}", CTX)).content == "ok"
    assert (await registry.execute("flaky", "{}", CTX)).content == "ok"
    assert len(attempts) == 2


async def test_long_output_is_truncated_with_a_note_to_the_model() -> None:
    @tool
    async def dump() -> str:
        """Dump everything."""
        return "x" * 5000

    outcome = await ToolRegistry([dump], max_result_chars=1000).execute("dump", "{}", CTX)
    assert outcome.ok
    assert outcome.content.startswith("x" * 1000)
    assert outcome.content[1000:] == "\n[output truncated: 4000 of 5000 characters omitted; narrow the query to see more]"


async def test_permission_hook_sees_the_context_and_can_refuse() -> None:
    asked: list[tuple[str, str]] = []

    async def admins_only(t: object, ctx: ToolContext) -> str | None:
        asked.append((getattr(t, "name", "?"), ctx.user_id))
        return None if "admin" in ctx.roles else "only admins may reboot"

    ran: list[str] = []

    @tool
    async def reboot(host: str) -> str:
        """Reboot a host.

        Args:
            host: Host name.
        """
        ran.append(host)
        return "rebooting"

    registry = ToolRegistry([reboot], permission=admins_only)
    refused = await registry.execute("reboot", '{"host": "web-1"}', CTX)
    assert not refused.ok and refused.summary == "not allowed: only admins may reboot"
    assert refused.arguments == {"host": "web-1"}
    admin = ToolContext(user_id="U9", roles=frozenset({"admin"}))
    assert (await registry.execute("reboot", '{"host": "web-1"}', admin)).ok
    assert asked == [("reboot", "U1"), ("reboot", "U9")] and ran == ["web-1"]


async def test_a_crashing_permission_hook_refuses_instead_of_raising() -> None:
    async def broken(t: object, ctx: ToolContext) -> str | None:
        raise RuntimeError("policy service down")

    @tool
    async def reboot() -> str:
        """Reboot."""
        raise AssertionError("must not run")

    outcome = await ToolRegistry([reboot], permission=broken).execute("reboot", "{}", CTX)
    assert not outcome.ok and outcome.summary == "not allowed: the permission check failed"


async def test_cancellation_propagates_out_of_execute() -> None:
    started = asyncio.Event()

    @tool
    async def hang() -> str:
        """Hangs."""
        started.set()
        await asyncio.Event().wait()
        return ""

    task = asyncio.create_task(ToolRegistry([hang]).execute("hang", "{}", CTX))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_registry_specs_add_replace_and_remove() -> None:
    @tool
    def a() -> str:
        """First."""
        return ""

    @tool(name="a", description="Replacement.")
    def a2() -> str:
        return ""

    @tool
    def b() -> str:
        """Second."""
        return ""

    registry = ToolRegistry([a, b])
    registry.add(a2)
    assert registry.names == ["a", "b"] and len(registry) == 2
    assert registry.specs()[0] == {
        "type": "function",
        "function": {"name": "a", "description": "Replacement.", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    }
    registry.remove("a")
    registry.remove("never-there")
    assert registry.names == ["b"] and registry.get("a") is None


def test_tools_say_whether_they_are_read_only_and_the_registry_names_those_that_are() -> None:
    @tool(read_only=True)
    def look() -> str:
        """Looks something up."""
        return ""

    @tool
    def change() -> str:
        """Changes something."""
        return ""

    class Bare:
        """A tool of its own class that says nothing about being read-only."""

        name = "bare"
        description = "Bare."
        parameters: dict[str, object] = {"type": "object", "properties": {}}
        timeout_s = None

        async def invoke(self, arguments: object, ctx: ToolContext) -> ToolOutput:
            return ToolOutput(content="", summary="")

    class Truthy(Bare):
        name = "truthy"
        read_only = "yes"  # only True counts: a stray truthy value must not open a tool to unattended turns

    assert look.read_only is True and change.read_only is False
    registry = ToolRegistry([look, change, Bare(), Truthy()])
    assert registry.read_only_names() == frozenset({"look"})
    registry.remove("look")
    assert registry.read_only_names() == frozenset()


async def test_a_cached_tool_that_reads_the_context_never_serves_one_askers_result_to_another() -> None:
    @tool(cache_ttl_s=60)
    async def my_servers(ctx: ToolContext) -> str:
        """Servers the asker owns."""
        return f"servers of {ctx.user_id}"

    registry = ToolRegistry([my_servers])
    ann = await registry.execute("my_servers", "{}", CTX)
    bob = await registry.execute("my_servers", "{}", ToolContext(user_id="U2", platform="slack"))
    assert (ann.content, bob.content) == ("servers of U1", "servers of U2")


def test_ttl_cache_expires_on_its_clock_and_evicts_the_soonest_to_expire() -> None:
    now = [100.0]
    cache = TTLCache(10, max_entries=2, clock=lambda: now[0])
    cache.put(("aliyun", "10.0.0.1"), "web-1")
    now[0] += 1
    cache.put(("aws", "10.0.0.1"), "none")
    assert cache.get(("aliyun", "10.0.0.1")) == "web-1"
    now[0] += 2
    cache.put(("tencent", "10.0.0.1"), "db-1")  # full: the aliyun entry expires first, so it goes
    assert cache.get(("aliyun", "10.0.0.1")) is None and cache.get(("tencent", "10.0.0.1")) == "db-1"
    now[0] += 8.5  # aws (stored at 101) is past its 10 s; tencent (stored at 103) is not
    assert cache.get(("aws", "10.0.0.1")) is None and cache.get(("tencent", "10.0.0.1")) == "db-1"
    off = TTLCache(0)
    off.put("k", "v")
    assert off.get("k") is None


async def test_the_registry_recalls_recent_outcomes_by_the_text_the_model_read() -> None:
    @tool
    async def lookup(ip: str) -> ToolOutput:
        """Look up an IP.

        Args:
            ip: The address.
        """
        if ip == "10.0.0.9":
            raise ToolError("backend busy")
        return ToolOutput(content=f"{ip} is web-1", summary="1 found", data={"hosts": [{"name": "web-1", "ip": ip}]})

    @tool
    async def note() -> str:
        """A text-only tool."""
        return "just text"

    registry = ToolRegistry([lookup, note], recent_outcomes=2)
    found = await registry.execute("lookup", {"ip": "10.0.0.1"}, CTX)
    assert found.content == "10.0.0.1 is web-1" and found.data == {"hosts": [{"name": "web-1", "ip": "10.0.0.1"}]}
    assert registry.recall("10.0.0.1 is web-1") == found
    failed = await registry.execute("lookup", {"ip": "10.0.0.9"}, CTX)
    assert (failed.content, failed.error, failed.data) == ("Error: backend busy", "backend busy", None)
    assert registry.recall("Error: backend busy") == failed
    text = await registry.execute("note", "{}", CTX)
    assert text.data is None and registry.recall("just text") == text
    assert registry.recall("10.0.0.1 is web-1") is None  # bounded: the oldest made room
    assert registry.recall("never sent") is None
