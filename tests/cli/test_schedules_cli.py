"""``botgateway schedules list`` and ``schedules run`` as an operator runs them: subprocesses.

``list`` reads config.yaml only; ``run`` posts one report now through the fake
Slack, the scripted model answering it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.cli.cli_process import _FOREIGN, run_cli
from tests.cli.gateway_process import free_port, gateway_config
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_env import answer_of
from tests.paths import REPO
from tools.demo.script import Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

SCHEDULES = [
    {"name": "stopped-prod", "cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai",
     "to": ["dingtalk:cid0abc123==", "slack:C0OPS"], "prompt": "List the stopped servers in prod", "role": "oncall"},
    {"name": "nightly-ny", "cron": "30 1 * * *", "timezone": "America/New_York", "to": ["slack:C0OPS"],
     "prompt": "Summarize the day's alerts", "role": "oncall", "grace_s": 120},
]


def write_config(tmp_path: Path, schedules: list[dict[str, Any]]) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "llm": {"provider": "demo"},
        "memory": {"sqlite_path": str(tmp_path / "gw.db")},
        "access": {"roles": {"oncall": {"tools": ["*"]}}},
        "schedules": schedules,
    }))
    return config


def test_list_as_json_gives_each_next_run_in_its_zone_and_in_utc(tmp_path: Path) -> None:
    config = write_config(tmp_path, SCHEDULES)
    # Friday evening in Shanghai, the day before New York's clocks go back.
    done = run_cli("schedules", "list", "--format", "json", "--after", "2026-10-31T12:00", "-c", str(config),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["name"], r["next_run"], r["next_run_utc"], r["to"]) for r in rows] == [
        ("stopped-prod", "2026-11-02T09:00:00+08:00", "2026-11-02T01:00:00Z", ["dingtalk:cid0abc123==", "slack:C0OPS"]),
        ("nightly-ny", "2026-11-01T01:30:00-04:00", "2026-11-01T05:30:00Z", ["slack:C0OPS"]),
    ]
    assert [(r["cron"], r["timezone"], r["role"], r["grace_s"]) for r in rows] == [
        ("0 9 * * 1-5", "Asia/Shanghai", "oncall", 600.0), ("30 1 * * *", "America/New_York", "oncall", 120.0)
    ]
    assert not tmp_path.joinpath("gw.db").exists()  # the config alone: no store was opened


def test_list_as_a_table_shows_the_same_runs(tmp_path: Path) -> None:
    config = write_config(tmp_path, SCHEDULES)
    done = run_cli("schedules", "list", "--after", "2026-11-01T05:30:00Z", "-c", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    prod = next(line for line in lines if "stopped-prod" in line)
    assert all(part in prod for part in ("0 9 * * 1-5", "Asia/Shanghai", "Mon 2026-11-02 09:00 +08:00",
                                         "2026-11-02T01:00:00Z", "dingtalk:cid0abc123==, slack:C0OPS"))
    nightly = next(line for line in lines if "nightly-ny" in line)
    # 01:30 came twice that night; the report runs once: next on the 2nd, in standard time.
    assert "Mon 2026-11-02 01:30 -05:00" in nightly and "2026-11-02T06:30:00Z" in nightly
    assert "next run (its zone)" in done.stdout and "next run (UTC)" in done.stdout


def test_list_without_schedules_says_where_to_add_them(tmp_path: Path) -> None:
    config = write_config(tmp_path, [])
    table = run_cli("schedules", "list", "-c", str(config), cwd=tmp_path)
    assert (table.returncode, table.stdout.strip()) == (
        0, "No schedules are configured (see the schedules: section of config.yaml)."
    )
    as_json = run_cli("schedules", "list", "--format", "json", "-c", str(config), cwd=tmp_path)
    assert (as_json.returncode, json.loads(as_json.stdout)) == (0, [])


def test_a_bad_after_is_a_usage_error_saying_what_is_accepted(tmp_path: Path) -> None:
    config = write_config(tmp_path, SCHEDULES)
    done = run_cli("schedules", "list", "--after", "tomorrow", "-c", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "'tomorrow' is not an ISO date or time" in done.stderr and "Traceback" not in done.stderr


def test_run_with_an_unknown_name_is_a_usage_error_listing_the_names(tmp_path: Path) -> None:
    config = write_config(tmp_path, SCHEDULES)
    done = run_cli("schedules", "run", "stopped-dev", "-c", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "no schedule is called 'stopped-dev'; schedules: stopped-prod, nightly-ny" in done.stderr
    assert "Traceback" not in done.stderr


REPORT = "2 servers are stopped in prod: db-3 (account ops) and cache-7 (account web)."


def report_answer(body: dict[str, Any]) -> Script:
    question = str([m for m in body["messages"] if m.get("role") == "user"][-1].get("content") or "")
    text = REPORT if "stopped servers" in question else f"unexpected question: {question}"
    return Script(chunks=[role_chunk(), *text_chunks(text, 16), finish_chunk("stop")])


async def botgateway(*args: str, cwd: Path) -> tuple[int, str, str]:
    """The CLI in a subprocess, without blocking the fakes running in this event loop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(REPO)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botgateway.cli", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_run_posts_the_report_now_as_one_final_card_in_the_channel(tmp_path: Path) -> None:
    async with FakeSlack() as fake, ScriptedLLMServer(responder=report_answer) as llm:
        config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake, http_port=free_port())
        config["http"] = {"enabled": False}
        config["access"] = {"roles": {"oncall": {"tools": ["*"]}}}
        config["schedules"] = [{**SCHEDULES[0], "to": ["slack:C0OPS"]}]
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))

        code, out, err = await botgateway("schedules", "run", "stopped-prod", "-c", str(path), cwd=tmp_path)

        assert code == 0, err
        assert re.fullmatch(r"✓ stopped-prod: card done \(turn \S+\)\n", out), out
        cards = fake.channel_messages("C0OPS")
        assert len(cards) == 1 and cards[0].thread_ts is None  # a message of the channel, not a thread reply
        assert answer_of(cards[0].markdown()).strip() == REPORT and not cards[0].streaming
        asked = [m["content"] for m in llm.requests[0]["messages"] if m.get("role") == "user"]
        assert asked == ["List the stopped servers in prod"]
        # Audited as the schedule, with its role.
        code, out, err = await botgateway("audit", "--format", "jsonl", "-c", str(path), cwd=tmp_path)
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [(r["principal"], r["role"], "C0OPS" in r["channel"], r["turn_outcome"]) for r in rows] == [
            ("schedule:stopped-prod", "oncall", True, "done")
        ]
