"""``botgateway usage``: totals by user, channel, model or day, in a table, JSON lines or CSV; run as an operator does."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

from botgateway.cli.usage import COLUMNS, usage_totals, write_totals
from botgateway.stores.base import UsageRow
from botgateway.stores.sqlite import SqliteStore
from tests.paths import REPO

DAY1 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC).timestamp()
DAY2 = datetime(2026, 11, 29, 23, 30, tzinfo=UTC).timestamp()

ROWS = [
    UsageRow(at=DAY1, turn_id="t1", principal="slack:U0ALICE", platform="slack", channel="C0OPS", model="deepseek-chat",
             prompt_tokens=1000, completion_tokens=100, cached_tokens=600, reasoning_tokens=0, cost=0.0005, currency="USD"),
    UsageRow(at=DAY1 + 5, turn_id="t1", principal="slack:U0ALICE", platform="slack", channel="C0OPS",
             model="deepseek-chat", prompt_tokens=1500, completion_tokens=200, cached_tokens=1000, cost=0.0007,
             currency="USD"),
    UsageRow(at=DAY2, turn_id="t2", principal="dingtalk:staff7", platform="dingtalk", channel="cid9", model="qwen-max",
             prompt_tokens=3000, completion_tokens=400, reasoning_tokens=150, cost=None),
    UsageRow(at=DAY2 + 60, principal="gateway", model="deepseek-chat", purpose="summary", prompt_tokens=800,
             completion_tokens=50, cost=0.0002, currency="USD"),
]


def test_by_model_sums_each_models_calls_most_tokens_first() -> None:
    totals = usage_totals(ROWS, "model")
    assert totals == [
        {"model": "deepseek-chat", "calls": 3, "prompt_tokens": 3300, "cached_tokens": 1600, "completion_tokens": 350,
         "reasoning_tokens": 0, "total_tokens": 3650, "cost": 0.0014, "currency": "USD", "unpriced_calls": 0},
        {"model": "qwen-max", "calls": 1, "prompt_tokens": 3000, "cached_tokens": 0, "completion_tokens": 400,
         "reasoning_tokens": 150, "total_tokens": 3400, "cost": None, "currency": "", "unpriced_calls": 1},
    ]


def test_by_user_channel_and_day() -> None:
    by_user = {t["user"]: (t["calls"], t["total_tokens"], t["cost"]) for t in usage_totals(ROWS, "user")}
    assert by_user == {"slack:U0ALICE": (2, 2800, 0.0012), "dingtalk:staff7": (1, 3400, None),
                       "gateway": (1, 850, 0.0002)}
    assert [t["channel"] for t in usage_totals(ROWS, "channel")] == ["dingtalk:cid9", "slack:C0OPS", "(none)"]
    by_day = usage_totals(ROWS, "day")
    assert [(t["day"], t["calls"], t["cost"], t["unpriced_calls"]) for t in by_day] == [
        ("2026-11-28", 2, 0.0012, 0), ("2026-11-29", 2, 0.0002, 1)
    ]
    assert [t["day"] for t in usage_totals(ROWS, "day", since=DAY2)] == ["2026-11-29"]


def test_jsonl_and_csv_carry_every_column() -> None:
    totals = usage_totals(ROWS, "model")
    out = io.StringIO()
    write_totals(totals, "model", "jsonl", out)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == totals

    out = io.StringIO()
    write_totals(totals, "model", "csv", out)
    read = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(read[0]) == ["model", *COLUMNS]
    assert [(r["model"], r["total_tokens"], r["cost"]) for r in read] == [
        ("deepseek-chat", "3650", "0.0014"), ("qwen-max", "3400", "")
    ]


def test_the_table_has_a_total_and_flags_unpriced_calls() -> None:
    out = io.StringIO()
    write_totals(usage_totals(ROWS, "model"), "model", "table", out)
    text = out.getvalue()
    assert "Model usage by model: 4 call(s)" in text
    assert "deepseek-chat" in text and "0.001400 USD" in text
    assert "total" in text and "7,050" in text and "0.001400 USD*" in text
    assert "* 1 call(s) had no price" in text and "usage.prices" in text


def test_the_table_prints_brackets_as_they_are() -> None:
    # A model or principal named like rich markup must neither crash the table nor vanish from it.
    odd = [UsageRow(at=DAY1, principal="slack:[/bold]U0", model="[bold]local[/]", prompt_tokens=5, cost=None),
           UsageRow(at=DAY1, principal="web:[red]x", model="m[/]", prompt_tokens=1, cost=0.1, currency="[USD]")]
    for by in ("model", "user"):
        out = io.StringIO()
        write_totals(usage_totals(odd, by), by, "table", out)
        text = out.getvalue()
        for name in ("[bold]local[/]", "m[/]") if by == "model" else ("slack:[/bold]U0", "web:[red]x"):
            assert name in text
        assert "0.100000 [USD]" in text


async def botgateway(*args: str, cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botgateway.cli", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_the_command_reads_the_configured_store(tmp_path: Path) -> None:
    db = tmp_path / "gw.db"
    store = SqliteStore(db)
    await store.open()
    await store.record_usage(ROWS)
    await store.close()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"memory": {"sqlite_path": str(db)}}))

    code, out, err = await botgateway("usage", "--by", "user", "--format", "jsonl", "--since", "2026-11-29", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert [(line["user"], line["calls"]) for line in map(json.loads, out.splitlines())] == [
        ("dingtalk:staff7", 1), ("gateway", 1)
    ]

    code, out, err = await botgateway("usage", "--by", "day", "--format", "csv", cwd=tmp_path)
    assert code == 0 and out.splitlines()[0] == ",".join(["day", *COLUMNS]) and len(out.splitlines()) == 3

    code, out, err = await botgateway("usage", "--by", "team", cwd=tmp_path)
    assert code == 2 and "invalid choice: 'team'" in err and "user" in err and "Traceback" not in err
    code, out, err = await botgateway("usage", "--since", "last week", cwd=tmp_path)
    assert code == 2 and "neither an age" in err and "Traceback" not in err


async def test_a_limit_that_cuts_the_calls_short_is_warned_about(tmp_path: Path) -> None:
    db = tmp_path / "gw.db"
    store = SqliteStore(db)
    await store.open()
    await store.record_usage(ROWS)
    await store.close()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"memory": {"sqlite_path": str(db)}}))

    code, out, err = await botgateway("usage", "--format", "jsonl", "--limit", "3", cwd=tmp_path)
    assert code == 0 and sum(json.loads(line)["calls"] for line in out.splitlines()) == 3
    assert "only the newest 3 model calls were read (--limit 3)" in err and "raise --limit" in err
    code, out, err = await botgateway("usage", "--format", "jsonl", "--limit", "5", cwd=tmp_path)
    assert code == 0 and err == "" and sum(json.loads(line)["calls"] for line in out.splitlines()) == 4
