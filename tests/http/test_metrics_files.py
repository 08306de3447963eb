"""``/metrics`` of several workers sums their files, even while one of them is creating its own.

A real worker process (prometheus_client in multiprocess mode) writes a counter
to the directory; beside it lies the empty file a starting worker has just
created and not yet sized. prometheus_client's own collector fails the whole
scrape on that file; ours leaves it out and reports the counter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from botgateway.http.metrics import WorkerFiles

_WORKER = """
from prometheus_client import Counter
Counter("answers", "Answers given").inc(3)
"""


def test_a_scrape_sums_the_workers_files_and_leaves_out_one_still_being_created(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", _WORKER], env=env, check=True, timeout=60)
    (tmp_path / "counter_4242.db").touch()  # a worker starting up: created, not yet sized

    with pytest.raises(Exception):  # noqa: B017 - prometheus_client's own collector fails on it (a struct error)
        generate_latest(_registry(MultiProcessCollector, tmp_path))
    scraped = generate_latest(_registry(WorkerFiles, tmp_path)).decode()
    assert "answers_total 3.0" in scraped


def _registry(collector: type, path: Path) -> CollectorRegistry:
    registry = CollectorRegistry()
    if collector is MultiProcessCollector:
        MultiProcessCollector(registry, path=str(path))
    else:
        registry.register(WorkerFiles(str(path)))
    return registry
