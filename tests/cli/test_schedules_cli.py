"""``botgateway schedules list`` and ``schedules run`` as an operator runs them: subprocesses.

``list`` reads config.yaml only; ``run`` posts one report now through the fake
Slack, the scripted model answering it: by itself when no gateway runs, and
through the running gateway (a real ``botgateway run``) when one does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from tests.cli.cli_process import _FOREIGN, run_cli
from tests.cli.gateway_process import free_port, gateway_config, start_gateway
from tests.fakes.slack import FakeSlack, Message
from tests.fakes.slack_env import answer_of
from tests.fleet.harness import slack_section
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


def markdown_blocks(message: Message) -> list[str]:
    """The texts of a Slack message's markdown blocks: a report's heading first, then its answer."""
    return [str(block["text"]) for block in message.blocks if block.get("type") == "markdown"]


HEADING = re.compile(
    r"🗓 \*\*Scheduled report: stopped-prod\*\* · (\d{4}-\d\d-\d\d \d\d:\d\d) Asia/Shanghai \(run by hand\)\n"
    r"> List the stopped servers in prod"
)


def assert_headed_report(message: Message, asked: tuple[datetime, datetime]) -> None:
    """One final card: the schedule's heading (name, the moment asked in Shanghai, by hand, the prompt), the answer."""
    heading, answer = markdown_blocks(message)
    match = HEADING.fullmatch(heading)
    assert match, heading
    shanghai = ZoneInfo("Asia/Shanghai")
    shown = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=shanghai)
    start, end = (moment.astimezone(shanghai).replace(second=0, microsecond=0) for moment in asked)
    assert start <= shown <= end
    assert answer_of(answer).strip() == REPORT and not message.streaming


async def test_run_without_a_gateway_posts_the_report_itself_as_one_headed_card(tmp_path: Path) -> None:
    async with FakeSlack() as fake, ScriptedLLMServer(responder=report_answer) as llm:
        config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake, http_port=free_port())
        config["http"] = {"enabled": False}
        config["access"] = {"roles": {"oncall": {"tools": ["*"]}}}
        config["schedules"] = [{**SCHEDULES[0], "to": ["slack:C0OPS"]}]
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))

        before = datetime.now(UTC)
        code, out, err = await botgateway("schedules", "run", "stopped-prod", "-c", str(path), cwd=tmp_path)

        assert code == 0, err
        assert re.fullmatch(r"✓ stopped-prod → slack:C0OPS: card done \(turn \S+\)\n", out), out
        assert "took" not in err  # nothing to hand over to: it ran here
        cards = fake.channel_messages("C0OPS")
        assert len(cards) == 1 and cards[0].thread_ts is None  # a message of the channel, not a thread reply
        assert_headed_report(cards[0], (before, datetime.now(UTC)))
        asked = [m["content"] for m in llm.requests[0]["messages"] if m.get("role") == "user"]
        assert asked == ["List the stopped servers in prod"]
        # Audited as the schedule, with its role.
        code, out, err = await botgateway("audit", "--format", "jsonl", "-c", str(path), cwd=tmp_path)
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [(r["principal"], r["role"], "C0OPS" in r["channel"], r["turn_outcome"]) for r in rows] == [
            ("schedule:stopped-prod", "oncall", True, "done")
        ]


LEAP_DAY = "0 9 29 2 *"
"""A slot that is never due while the test runs (its gateway would otherwise run a slot within grace at start)."""


async def test_run_beside_a_gateway_in_slack_http_mode_hands_the_report_to_it(tmp_path: Path) -> None:
    async with FakeSlack() as fake, ScriptedLLMServer(responder=report_answer) as llm:
        config = gateway_config(tmp_path, llm_url=llm.base_url, fake=fake, http_port=free_port())
        # The Events API on a port of its own: a second process starting the adapter could not listen there.
        config["adapters"]["slack"] = slack_section(fake, free_port())
        config["access"] = {"roles": {"oncall": {"tools": ["*"]}}}
        config["schedules"] = [{**SCHEDULES[0], "cron": LEAP_DAY, "to": ["slack:C0OPS"]}]
        gateway = await start_gateway(tmp_path, config)
        try:
            await gateway.wait_readyz(200)
            before = datetime.now(UTC)
            code, out, err = await botgateway("schedules", "run", "stopped-prod", "-c", str(tmp_path / "config.yaml"),
                                              cwd=tmp_path)
            after = datetime.now(UTC)

            assert code == 0, (out, err)
            turn = re.fullmatch(r"✓ stopped-prod → slack:C0OPS: card done \(turn (\S+)\)\n", out)
            assert turn, out
            assert "the running gateway (instance " in err and "could not start" not in err, err
            cards = fake.channel_messages("C0OPS")
            assert len(cards) == 1, [markdown_blocks(card) for card in cards]
            assert_headed_report(cards[0], (before, after))
            # The gateway ran it: its own turn, taken from the request.
            started = [line for line in gateway.log_lines() if line.get("event") == "schedules.report_started"]
            assert [line["turn_id"] for line in started] == [turn.group(1)]
            assert any(line.get("event") == "schedules.run_now_taken" for line in gateway.log_lines())
        finally:
            gateway.signal(signal.SIGTERM)
            try:
                assert await gateway.wait() == 0
            finally:
                await gateway.kill()
