"""A fleet on loopback: several real ``botgateway run`` processes, one Redis, the fake Slack and the scripted model.

Each :class:`Replica` is a subprocess started as an operator starts one
(``python -m botgateway.cli run -c config.yaml``) with its own instance id and
ports: Slack in HTTP Events mode (so the test, standing in for a load
balancer, chooses which replica receives each event) and the gateway's HTTP
server for its probes. All share one Redis key prefix, which is the whole
fleet's state. The model and Slack are served by the test process; the
replicas know them only by URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.fakes.stores import REDIS_URL
from tests.paths import REPO
from tests.ports import free_port

__all__ = ["Replica", "dingtalk_section", "fleet_config", "free_port", "post_event", "slack_section", "start_replica"]

_FOREIGN = ("LLM_", "OPENAI_", "SLACK_", "DINGTALK_", "REDIS_", "BOTGATEWAY_", "ALIBABA_CLOUD_", "POD_NAME", "HOSTNAME")
"""Variables of the machine a config may read: a replica must not pick them up."""


def slack_section(fake: FakeSlack, port: int) -> dict[str, Any]:
    """The Slack adapter in HTTP Events mode on ``port``, talking to ``fake``."""
    return {
        "enabled": True, "mode": "http", "bot_token": BOT_TOKEN, "app_token": APP_TOKEN,
        "signing_secret": SIGNING_SECRET, "api_base_url": fake.api_url, "http_host": "127.0.0.1",
        "http_port": port, "streaming": "edit", "locale": "en",
        "policy": {"answer": {"min_chars": 1, "min_interval_s": 0.05, "max_wait_s": 0.2}},
    }


def dingtalk_section(fake: FakeDingTalk) -> dict[str, Any]:
    """The DingTalk adapter in Stream mode with the AI card, talking to ``fake``."""
    return {
        "enabled": True, "mode": "stream", "client_id": fake.client_id, "client_secret": fake.client_secret,
        "card_template_id": "botgateway-ai-card.schema", "api_base_url": fake.base_url,
        "oapi_base_url": fake.base_url, "locale": "zh-CN",
    }


def fleet_config(*, name: str, prefix: str, llm_url: str, http_port: int, adapters: Mapping[str, Any],
                 redis_url: str = REDIS_URL, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One replica's config: Redis under ``prefix``, the given adapter sections, probes on ``http_port``."""
    config: dict[str, Any] = {
        "log": {"level": "info", "format": "json"},
        "llm": {"provider": "custom", "base_url": llm_url, "api_key": "fleet-test", "model": "m",
                "max_rounds": 4, "max_retries": 0},
        "memory": {"store": "redis", "redis_url": redis_url, "redis_prefix": prefix},
        "gateway": {"instance_id": name, "admins": ["UADMIN"], "heartbeat_s": 0.5, "instance_ttl_s": 2.0,
                    "recover_interval_s": 0.5, "replicas": 3, "drain_s": 5},
        "http": {"enabled": True, "host": "127.0.0.1", "port": http_port},
        "card": {"footer": False, "show_thought": False, "final_deadline_s": 30},
        "adapters": {"terminal": {"enabled": False}, **adapters},
    }
    for section, values in (overrides or {}).items():
        merged = dict(config.get(section) or {})
        merged.update(values)
        config[section] = merged
    return config


@dataclass
class Replica:
    """One running ``botgateway run`` process of the fleet."""

    name: str
    """Its instance id."""
    process: asyncio.subprocess.Process
    events_url: str
    """Where Slack events for this replica go (empty without Slack in HTTP mode)."""
    probe_url: str
    """Its gateway HTTP server (``/healthz``, ``/readyz``)."""
    log_path: Path
    """Its stdout and stderr (JSON log lines)."""
    exit_code: int | None = field(default=None)

    def log_lines(self) -> list[dict[str, Any]]:
        """Its JSON log lines so far."""
        lines = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                lines.append(line)
        return lines

    async def wait_logged(self, event: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until the replica has logged ``event`` ``count`` times (its lines reach the file as they happen,
        after the platform saw what they tell); returns those lines."""
        async def poll() -> list[dict[str, Any]]:
            while len(lines := [line for line in self.log_lines() if line.get("event") == event]) < count:
                # The log is a file another process writes: there is nothing to await but its growth.
                await asyncio.sleep(0.05)
            return lines

        return await asyncio.wait_for(poll(), timeout)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until ``/readyz`` answers 200 (or fail with the replica's log when it exits first)."""
        async def poll() -> None:
            async with aiohttp.ClientSession() as http:
                while True:
                    if self.process.returncode is not None:
                        raise AssertionError(f"replica {self.name} exited {self.process.returncode}:\n"
                                             + self.log_path.read_text(errors="replace")[-4000:])
                    try:
                        async with http.get(f"{self.probe_url}/readyz") as response:
                            if response.status == 200:
                                return
                    except aiohttp.ClientError:
                        pass
                    # Polling an HTTP probe is what a load balancer does; the interval only paces the loop.
                    await asyncio.sleep(0.1)

        await asyncio.wait_for(poll(), timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process."""
        if self.process.returncode is None:
            self.process.send_signal(sig)

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the exit (SIGKILL past ``timeout``); returns the exit code."""
        self.signal(signal.SIGTERM)
        try:
            self.exit_code = await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.process.kill()
            self.exit_code = await self.process.wait()
        return self.exit_code


async def start_replica(tmp_path: Path, config: dict[str, Any]) -> Replica:
    """Write ``config`` and start ``botgateway run`` on it with a clean environment."""
    name = str(config["gateway"]["instance_id"])
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True))
    log_path = folder / "replica.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file as they happen, for the test to read
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "botgateway.cli", "run", "-c", str(config_path),
            cwd=folder, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )
    slack = config["adapters"].get("slack") or {}
    return Replica(
        name=name,
        process=process,
        events_url=f"http://127.0.0.1:{slack['http_port']}/slack/events" if slack.get("mode") == "http" else "",
        probe_url=f"http://127.0.0.1:{config['http']['port']}",
        log_path=log_path,
    )


async def post_event(http: aiohttp.ClientSession, fake: FakeSlack, replica: Replica, event: dict[str, Any]) -> None:
    """Deliver one Events API event to ``replica`` as Slack does (signed); anything but 200 fails the test with what
    answered and the replica's log."""
    body = json.dumps(fake.event_payload(event))
    async with http.post(replica.events_url, data=body, headers=fake.sign(body)) as response:
        if response.status == 200:
            return
        answer = (await response.text())[:500]
        server = response.headers.get("Server", "")
    raise AssertionError(f"{replica.events_url} answered {response.status} ({server}): {answer!r}\n"
                         f"replica {replica.name} log:\n" + replica.log_path.read_text(errors="replace")[-4000:])
