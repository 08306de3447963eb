"""A real Prometheus process on loopback serving history that promtool loaded from an OpenMetrics text."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ports import free_port


def ready(url: str) -> bool:
    """Whether the Prometheus at ``url`` answers ``/-/ready``."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running_prometheus(root: Path, openmetrics: str) -> Iterator[str]:
    """A Prometheus whose TSDB holds ``openmetrics`` (ending in ``# EOF``), in ``root``; yields its URL.

    Skips the test when the Debian package ``prometheus`` is not installed (CI installs it).
    """
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not binary or not promtool:
        pytest.skip("prometheus/promtool not installed (Debian package 'prometheus'; CI installs it)")
    (root / "history.om").write_text(openmetrics)
    data = root / "data"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "history.om"), str(data)],
                   check=True, capture_output=True, timeout=120)
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    yield from _serve(binary, root, ["--storage.tsdb.path=" + str(data)])


@contextmanager
def scraping_prometheus(root: Path, *, target: str, rules: str, alertmanager: str) -> Iterator[str]:
    """A Prometheus scraping ``target`` (``host:port``) every second and evaluating ``rules`` (a rule file's YAML)
    every second, its alerts sent to ``alertmanager`` (``host:port``); yields its URL, which is also its external
    URL (the ``generatorURL`` of its alerts). Skips like :func:`running_prometheus`."""
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("prometheus not installed (Debian package 'prometheus'; CI installs it)")
    root.mkdir(parents=True, exist_ok=True)
    (root / "rules.yml").write_text(rules)
    (root / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: [{str(root / 'rules.yml')!r}]\n"
        f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [{alertmanager!r}]\n"
        f"scrape_configs:\n  - job_name: demo\n    static_configs:\n      - targets: [{target!r}]\n"
    )
    yield from _serve(binary, root, [f"--storage.tsdb.path={root / 'data'}", "--rules.alert.resend-delay=1s"])


def _serve(binary: str, root: Path, args: list[str]) -> Iterator[str]:
    """Run Prometheus on ``root/prometheus.yml`` with ``args`` on a free loopback port (also its external URL)
    until the generator is closed; yields its URL once it is ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (root / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={root / 'prometheus.yml'}", *args, f"--web.listen-address=127.0.0.1:{port}",
         f"--web.external-url={url}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not become ready: {(root / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)  # polling a condition (readiness), with a deadline
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
