"""``botgateway audit`` as an operator runs it: a subprocess reading the store a gateway wrote.

A "killed" turn is one whose tool call never returns while the CLI reads the
store (as in tests/test_recovery.py): its calls are listed from the rows they
left, as ``unfinished``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from botgateway.cli.audit import audit_rows, parse_since, write_rows
from botgateway.stores.base import AuditRecord
from botgateway.stores.sqlite import SqliteStore
from botgateway.tooling import tool
from tests.paths import REPO
from tests.polling import until_read
from tests.test_recovery import process
from tools.demo.script import Script

SECRET = "sk-live-0123456789abcdef"


async def botgateway(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run the CLI in a subprocess without blocking the gateway running in this event loop."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botgateway.cli", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "gw.db")}}))
    return config


async def test_audit_csv_lists_the_tool_calls_of_a_killed_turn_with_secrets_redacted(tmp_path: Path) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    @tool
    def find_server(query: str) -> str:
        """Find a server.

        Args:
            query: IP or name.
        """
        return f"web-1 is {query}"

    @tool
    async def list_alarms(region: str, api_token: str = "") -> str:
        """List the alarms of a region.

        Args:
            region: Region name.
            api_token: A token for the alarm service.
        """
        entered.set()
        await gate.wait()  # the process is "killed" while this call runs
        return "none"

    async def responder(body: dict[str, Any]) -> Script:
        if len(body["messages"]) == 2:
            return Script.tool_calls([("c1", "find_server", {"query": "10.0.1.100"})])
        return Script.tool_calls([("c2", "list_alarms", {"region": "dc1", "api_token": SECRET})])

    config = write_config(tmp_path)
    async with process(tmp_path, "host-1", responder=responder, tools=(find_server, list_alarms)) as gateway:
        try:
            sub = await gateway.submit("which server is 10.0.1.100, and any alarms?")
            await asyncio.wait_for(entered.wait(), 10)
            reader = SqliteStore(tmp_path / "gw.db")
            try:  # the rows are written in the background: wait until both calls are on record
                await until_read(reader.audit_records, lambda found: sum(len(r.tool_calls) for r in found) == 2)
            finally:
                await reader.close()
            code, out, err = await botgateway("audit", "--format", "csv", "-c", str(config), cwd=tmp_path)
        finally:
            gate.set()
    assert code == 0, err
    assert SECRET not in out + err and "Traceback" not in err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["tool"], r["outcome"], r["turn_outcome"]) for r in rows] == [
        ("find_server", "ok", "unfinished"),
        ("list_alarms", "unfinished", "unfinished"),
    ]
    found, running = rows
    assert {r["turn_id"] for r in rows} == {sub.turn_id}
    assert (found["platform"], found["principal"], found["channel"]) == ("test", "test:alice", "chat-1")
    assert json.loads(found["arguments"]) == {"query": "10.0.1.100"}
    assert json.loads(running["arguments"]) == {"region": "dc1", "api_token": "***"}
    assert found["time"].endswith("Z") and found["question"] == "which server is 10.0.1.100, and any alarms?"


async def test_audit_filters_by_user_tool_and_time_and_lists_refusals(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    try:
        calls = ({"name": "k8s__get_pods", "arguments": {"ns": "web"}, "ok": True, "duration_s": 0.4, "started_at": 2e9},)
        await store.record_audit(AuditRecord("t1", "slack", "C1", "U1", "pods?", "done", tool_calls=calls,
                                             started_at=2e9, principal="slack:U1", team="T1", channel="C0OPS"))
        await store.record_audit(AuditRecord("t2", "slack", "C1", "U2", "more?", "limit:turns_per_minute",
                                             started_at=2e9 + 5, principal="slack:U2"))
        await store.record_audit(AuditRecord("t0", "dingtalk", "G1", "staff7", "old?", "done", started_at=1e9))
    finally:
        await store.close()
    config = write_config(tmp_path)
    code, out, err = await botgateway("audit", "--format", "jsonl", "--since", "2030-01-01", "-c", str(config), cwd=tmp_path)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["principal"], r["tool"], r["outcome"]) for r in rows] == [
        ("slack:U1", "k8s__get_pods", "ok"),
        ("slack:U2", "", "limit:turns_per_minute"),
    ]
    code, out, _ = await botgateway("audit", "--format", "jsonl", "--tool", "k8s__*", "-c", str(config), cwd=tmp_path)
    assert [json.loads(line)["turn_id"] for line in out.splitlines()] == ["t1"]
    code, out, _ = await botgateway("audit", "--user", "staff7", "-c", str(config), cwd=tmp_path)
    assert code == 0 and "dingtalk:staff7" in out and "slack:U1" not in out  # the table
    code, out, err = await botgateway("audit", "--since", "last week", "-c", str(config), cwd=tmp_path)
    assert code == 2 and "neither an age" in err and "Traceback" not in err
    code, out, err = await botgateway("audit", "--limit", "-5", "-c", str(config), cwd=tmp_path)
    assert code == 2 and "not a number of records" in err and "Traceback" not in err


def test_since_takes_ages_and_iso_dates_in_utc() -> None:
    now = 1_700_000_000.0
    assert parse_since("1h", now) == now - 3600
    assert parse_since("2d", now) == now - 2 * 86400
    assert parse_since("30m", now) == now - 1800
    assert parse_since("2023-11-14", now) == 1_699_920_000.0
    assert parse_since("2023-11-14T01:00:00+01:00", now) == 1_699_920_000.0
    with pytest.raises(argparse.ArgumentTypeError):
        parse_since("soon", now)


def test_rows_of_an_older_record_name_the_principal_and_redact_again() -> None:
    record = AuditRecord("t1", "slack", "C1", "U9", "q", "done",
                         tool_calls=({"name": "login", "arguments": {"password": "hunter2"}, "ok": False, "summary": "denied"},))
    [row] = audit_rows([record])
    assert row["principal"] == "slack:U9" and row["arguments"] == '{"password": "***"}'
    assert row["outcome"] == "failed: denied"


def test_the_table_prints_brackets_as_they_are() -> None:
    # Arguments, roles and outcomes written by others may look like rich markup: printed literally, never parsed.
    record = AuditRecord("t1", "web", "c", "[/admin]", "q", "done", role="[bold]oncall", tool_calls=(
        {"name": "grep", "arguments": {"pattern": "[/]"}, "ok": False, "summary": "[red]no match[/red]"},))
    out = io.StringIO()
    write_rows(audit_rows([record]), "table", out)
    text = out.getvalue()
    assert "[bold]oncall" in text and '"[/]"' in text and "[red]no match[/red]" in text
