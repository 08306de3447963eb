"""Prometheus: tokens by model and kind, cost by model; summed over the worker processes of ``run --workers``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from botgateway.stores.base import UsageRow
from botgateway.telemetry import PrometheusTelemetry
from tests.paths import REPO


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_tokens_by_model_and_kind_and_the_cost_of_priced_calls() -> None:
    telemetry = PrometheusTelemetry()
    telemetry.usage_recorded(UsageRow(at=1.0, model="gpt-4o", prompt_tokens=1200, completion_tokens=300,
                                      cached_tokens=1024, reasoning_tokens=256, cost=0.0042, currency="USD"))
    telemetry.usage_recorded(UsageRow(at=2.0, model="gpt-4o", prompt_tokens=800, completion_tokens=100,
                                      cost=0.003, currency="USD"))
    telemetry.usage_recorded(UsageRow(at=3.0, model="", prompt_tokens=5, completion_tokens=1))  # no price, no name
    text = exposition(telemetry.registry)
    assert 'botgateway_llm_tokens_total{kind="prompt",model="gpt-4o"} 2000.0' in text
    assert 'botgateway_llm_tokens_total{kind="completion",model="gpt-4o"} 400.0' in text
    assert 'botgateway_llm_tokens_total{kind="cached",model="gpt-4o"} 1024.0' in text
    assert 'botgateway_llm_tokens_total{kind="reasoning",model="gpt-4o"} 256.0' in text
    assert 'botgateway_llm_tokens_total{kind="prompt",model="unknown"} 5.0' in text
    assert 'botgateway_llm_cost_total{currency="USD",model="gpt-4o"} 0.0072' in text
    assert 'model="unknown"} ' in text and 'botgateway_llm_cost_total{currency="",model="unknown"}' not in text


_WORKER = """
import sys
from botgateway.stores.base import UsageRow
from botgateway.telemetry import PrometheusTelemetry

telemetry = PrometheusTelemetry()
n = int(sys.argv[1])
telemetry.usage_recorded(UsageRow(at=1.0, model="deepseek-chat", prompt_tokens=1000 * n, completion_tokens=10 * n,
                                  cached_tokens=500 * n, reasoning_tokens=n, cost=0.25 * n, currency="CNY"))
"""


async def test_the_workers_counters_are_summed_in_multiprocess_mode(tmp_path: Path) -> None:
    # As the supervisor of --workers sets it up: each worker process writes to files of one directory.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (1, 2):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _WORKER, str(n), env=env)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    every_worker = CollectorRegistry()
    MultiProcessCollector(every_worker, path=str(tmp_path))  # what /metrics does for the workers
    text = exposition(every_worker)
    assert 'botgateway_llm_tokens_total{kind="prompt",model="deepseek-chat"} 3000.0' in text
    assert 'botgateway_llm_tokens_total{kind="cached",model="deepseek-chat"} 1500.0' in text
    assert 'botgateway_llm_tokens_total{kind="completion",model="deepseek-chat"} 30.0' in text
    assert 'botgateway_llm_tokens_total{kind="reasoning",model="deepseek-chat"} 3.0' in text
    assert 'botgateway_llm_cost_total{currency="CNY",model="deepseek-chat"} 0.75' in text
