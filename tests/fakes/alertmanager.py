"""A real Prometheus Alertmanager the test owns, its webhook receiver pointed at a gateway.

Not a fake: Debian's ``prometheus-alertmanager`` binary (``.ci/run`` installs
it when missing), started on a loopback port with clustering off and its state
in the test's folder. The test fires and resolves alerts through Alertmanager's
own API (``POST /api/v2/alerts``, as Prometheus sends them), and Alertmanager
groups them and calls the webhook as it would in production: the payloads, the
timing of group_wait/group_interval and the credentials are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.ports import free_port

__all__ = ["Alertmanager", "RouteTiming", "alertmanager_binary", "require_alertmanager", "timestamp"]

BINARIES = ("prometheus-alertmanager", "alertmanager")
"""Debian's name for the binary, then upstream's."""


def alertmanager_binary() -> str | None:
    """The Alertmanager binary on this machine, or None."""
    return next((found for found in map(shutil.which, BINARIES) if found), None)


def require_alertmanager() -> str:
    """The Alertmanager binary; without one the test is skipped, saying why (and fails in CI, which installs it)."""
    binary = alertmanager_binary()
    if binary is not None:
        return binary
    reason = "no Alertmanager on this machine: apt-get install -y prometheus-alertmanager (.ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def timestamp(when: datetime | None = None) -> str:
    """``when`` (default: now) as the RFC 3339 time Alertmanager's API takes."""
    return (when or datetime.now(UTC)).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class RouteTiming:
    """The route's timing, as Alertmanager's ``route:`` says it (durations such as ``1s``, ``5m``, ``4h``)."""

    group_wait: str = "1s"
    """How long a new group waits for more alerts before its first notification."""
    group_interval: str = "1s"
    """How long a group waits before a notification of its changes."""
    repeat_interval: str = "1h"
    """How long before an unchanged group is notified again."""


class Alertmanager:
    """One ``prometheus-alertmanager`` on ``127.0.0.1:<port>``, every alert grouped by ``alertname`` to one webhook.

    Args:
        folder: Its config, state and log go here.
        webhook_url: The receiver's URL (the gateway's ``/alerts/alertmanager``).
        token: The bearer token the webhook sends (``alerts.token``).
        timing: The route's group_wait, group_interval and repeat_interval.
    """

    def __init__(self, folder: Path, *, webhook_url: str, token: str, timing: RouteTiming = RouteTiming()) -> None:
        self._binary = require_alertmanager()
        self._folder = folder
        self.port = free_port()
        """Its API's port."""
        self.config: dict[str, Any] = {
            "route": {"receiver": "botgateway", "group_by": ["alertname"], "group_wait": timing.group_wait,
                      "group_interval": timing.group_interval, "repeat_interval": timing.repeat_interval},
            "receivers": [{"name": "botgateway", "webhook_configs": [{
                "url": webhook_url, "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
            }]}],
        }
        """Its configuration file's content."""
        self.log_path = folder / "alertmanager.log"
        """Where its output goes."""
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """Everything it logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def start(self) -> None:
        """Start it and wait until it is ready (``/-/ready``); fail with its log when it exits first."""
        self._folder.mkdir(parents=True, exist_ok=True)
        config_path = self._folder / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(self.config))
        with self.log_path.open("wb") as out:
            self._process = await asyncio.create_subprocess_exec(
                self._binary, f"--config.file={config_path}", f"--storage.path={self._folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", f"--web.external-url={self.url}",
                "--cluster.listen-address=",  # one instance: no gossip port (9094) taken on the machine
                "--log.level=debug",
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            )
        async with asyncio.timeout(30), aiohttp.ClientSession() as http:
            while not await self._ready(http):
                if self._process.returncode is not None:
                    raise RuntimeError(f"alertmanager exited {self._process.returncode}:\n{self.output()[-3000:]}")
                await asyncio.sleep(0.05)  # polling a process we started: nothing to await instead

    async def _ready(self, http: aiohttp.ClientSession) -> bool:
        try:
            async with http.get(f"{self.url}/-/ready") as response:
                return response.status == 200
        except aiohttp.ClientError:
            return False

    async def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Send ``alerts`` to its API as Prometheus does (an ``endsAt`` in the past resolves an alert)."""
        async with aiohttp.ClientSession() as http, http.post(f"{self.url}/api/v2/alerts", json=alerts) as response:
            assert response.status == 200, await response.text()

    def failed_notifications(self) -> list[str]:
        """The log lines of webhook calls that did not get a 2xx answer."""
        return [line for line in self.output().splitlines() if "Notify attempt failed" in line
                or "Notify for alerts failed" in line]

    async def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL when it lingers) and reap it."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def __aenter__(self) -> Alertmanager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
