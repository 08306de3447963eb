"""``botgateway feedback`` as an admin runs it: a subprocess reading the votes a gateway stored."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import yaml

from botgateway.stores.base import FeedbackRecord
from botgateway.stores.sqlite import SqliteStore
from tests.cli.test_audit import botgateway

SOURCE = {"provider": "aliyun", "label": "Alibaba Cloud", "account": "prod", "region": "cn-hangzhou",
          "api": "DescribeInstances", "cached": True}


async def _stored_votes(tmp_path: Path) -> Path:
    """Three votes in the store of a config file: two today (one 👎 with a reason), one three days old."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "gw.db")}}))
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    now = time.time()
    common = {"platform": "slack", "channel": "C1", "asker": "slack:U9", "model": "deepseek-chat",
              "tools": ("search_ecs_by_ip",), "sources": (SOURCE,)}
    try:
        await store.record_feedback(FeedbackRecord(turn_id="t-old", voter="slack:U1", vote="up", at=now - 3 * 86400,
                                                   question="old question", **common))  # type: ignore[arg-type]
        await store.record_feedback(FeedbackRecord(turn_id="t1", voter="slack:U1", vote="down", at=now - 60,
                                                   reason="wrong region, token sk-live-0123456789abcdef",
                                                   question="where is 10.0.1.5", **common))  # type: ignore[arg-type]
        await store.record_feedback(FeedbackRecord(turn_id="t1", voter="dingtalk:staff1", vote="up", at=now - 30,
                                                   question="where is 10.0.1.5", **common))  # type: ignore[arg-type]
    finally:
        await store.close()
    return config


async def test_feedback_lists_the_votes_since_a_time_in_every_format(tmp_path: Path) -> None:
    config = await _stored_votes(tmp_path)

    code, out, err = await botgateway("feedback", "--since", "1d", "--format", "jsonl", "-c", str(config), cwd=tmp_path)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["turn_id"], r["voter"], r["vote"]) for r in rows] == [
        ("t1", "slack:U1", "down"), ("t1", "dingtalk:staff1", "up")]
    assert rows[0]["reason"].startswith("wrong region") and "sk-live" not in rows[0]["reason"]  # a secret stays masked
    assert rows[0]["sources"] == ["Alibaba Cloud prod/cn-hangzhou (DescribeInstances, cached)"]
    assert rows[0]["tools"] == ["search_ecs_by_ip"] and rows[0]["model"] == "deepseek-chat"

    code, out, err = await botgateway("feedback", "--format", "csv", "--vote", "up", "-c", str(config), cwd=tmp_path)
    assert code == 0, err
    listed = [(r["turn_id"], r["voter"]) for r in csv.DictReader(io.StringIO(out))]
    assert listed == [("t-old", "slack:U1"), ("t1", "dingtalk:staff1")]

    code, out, err = await botgateway("feedback", "-c", str(config), cwd=tmp_path)
    assert code == 0, err
    assert "3 vote(s): 2 👍, 1 👎" in out and "wrong region" in out


async def test_the_table_shows_brackets_as_typed(tmp_path: Path) -> None:
    """A question or reason with square brackets is text, not rich markup (``[/x]`` would not parse)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"llm": {"provider": "demo"}, "memory": {"sqlite_path": str(tmp_path / "gw.db")}}))
    store = SqliteStore(tmp_path / "gw.db")
    await store.open()
    try:
        await store.record_feedback(FeedbackRecord(
            turn_id="t1", voter="slack:U1", vote="down", at=time.time(), reason="the [/b] tag and [bold]x[/bold]",
            question="why is [red]web-1[/red] down?", tools=("[search]",)))
    finally:
        await store.close()
    code, out, err = await botgateway("feedback", "-c", str(config), cwd=tmp_path)
    assert code == 0, err
    assert "Traceback" not in err
    flat = "".join(out.split())  # the table may fold a long cell over lines
    assert "the[/b]tagand[bold]x[/bold]" in flat and "whyis[red]web-1[/red]down?" in flat and "[search]" in flat


async def test_a_since_that_is_no_time_is_a_usage_error(tmp_path: Path) -> None:
    config = await _stored_votes(tmp_path)
    code, _, err = await botgateway("feedback", "--since", "yesterday", "-c", str(config), cwd=tmp_path)
    assert code == 2 and "neither an age" in err
