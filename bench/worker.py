"""One scenario's botgateway, in its own process: the measured side of the benchmark.

``python -m bench.worker JOB.json RESULT.json`` builds the runtime exactly as
``botgateway run`` does (:func:`botgateway.cli.runtime.build_runtime`: store,
memory, model client, tools, tool loop, rate budget, Gateway) from a config
pointing at the orchestrator's fakes, starts the real adapter
(:func:`botgateway.cli.run.build_adapter`: ``SlackAdapter`` in Socket Mode or
``DingTalkAdapter`` in Stream mode), recovers the cards a killed predecessor
left open (resuming their questions) as ``botgateway run`` does, prints ``ready``, and serves until a
``stop`` line arrives on stdin. Then it shuts down in ``botgateway run``'s
order and writes its CPU time and RSS. It measures nothing about answers:
the orchestrator watches the fake platform for that. Only botgateway runs
here, so the CPU and memory numbers are its own.

A replica of a Slack fleet (``--replicas K``: ``job["replicas"]`` above 1) is
one of K such processes: Slack in HTTP Events mode on its own port, the Redis
store under the scenario's prefix, ``gateway.replicas: K`` and an instance id
of its own, as each replica of a deployment is configured.

A ``core`` job has no platform: :mod:`bench.core_worker` builds the same
runtime, submits the turns itself into the bench's own sink after ``go``, and
writes what it measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import structlog

from bench.model import BENCH_MODEL
from bench.process_stats import cpu_s, peak_rss_bytes, rss_bytes
from bench.settings import BenchSettings
from botgateway.cli.event_loop import run
from botgateway.config import Config, SlackConfig, load_config, parse_config

__all__ = ["bench_config", "main", "serve", "wait_for_line"]

REPO_ROOT = Path(__file__).resolve().parent.parent
INVENTORY = REPO_ROOT / "tools" / "sample_inventory.yaml"


def _platform_section(job: dict[str, Any], settings: BenchSettings) -> dict[str, Any]:
    """The adapter section pointing at the fake platform of ``job``."""
    if job["platform"] == "slack":
        from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

        section = {"enabled": True, "mode": "socket", "bot_token": BOT_TOKEN, "app_token": APP_TOKEN,
                   "api_base_url": job["platform_url"], "streaming": job["mode"], "locale": "en"}
        # What the fake counts, the adapter plans for: a channel's burst, and whether stream starts are messages
        # (the incident's two variants). A key the adapter does not know yet is left out, not refused.
        known = SlackConfig.model_fields
        if "post_burst" in known:
            section["post_burst"] = settings.post_burst
        if "stream_starts_per_channel" in known:
            section["stream_starts_per_channel"] = bool(job.get("stream_starts_per_channel", True))
        if job.get("http_port"):  # a replica of a fleet: events come over HTTP, from the bench as a load balancer
            section.update({"mode": "http", "signing_secret": SIGNING_SECRET, "http_host": "127.0.0.1",
                            "http_port": int(job["http_port"])})
        return section
    return {"enabled": True, "mode": "stream", "client_id": job["client_id"], "client_secret": job["client_secret"],
            "card_template_id": "botgateway-ai-card.schema", "api_base_url": job["platform_url"],
            "oapi_base_url": job["platform_url"], "locale": "zh-CN", "qps": settings.dingtalk_qps}


def _memory_section(job: dict[str, Any]) -> dict[str, Any]:
    """SQLite in the scenario's folder; the shared Redis under the scenario's prefix for several workers."""
    if job.get("redis_prefix"):
        return {"store": "redis", "redis_url": job["redis_url"], "redis_prefix": job["redis_prefix"]}
    return {"store": "sqlite", "sqlite_path": str(Path(job["tmp"]) / "bench.db")}


def bench_config(job: dict[str, Any]) -> Config:
    """The botgateway config of one scenario: the model and platform are the orchestrator's fakes.

    Product defaults everywhere except: the footer and thought are off (so the
    final text can be compared with the answer exactly), and ``--config`` may
    supply the ``card`` section, the adapter's ``policy``, ``gateway.event_loop``
    and ``gateway.max_concurrent_turns`` (the chat platforms' turn slots are the
    product's default otherwise: issue 30 judges Slack N=100 on the default
    config; a ``core`` job lets every turn run at once, ``max_concurrent_turns``
    ≥ N, as it measures the core, not the queue). A ``core`` job enables no
    adapter: the worker submits the turns itself. A job of one of several core
    workers (``redis_prefix`` set) has the config ``botgateway run --workers``
    needs: the Redis store under the scenario's key prefix and ``gateway.workers``;
    a replica of a Slack fleet has the Redis store, ``gateway.replicas`` and its
    own ``gateway.instance_id``, with Slack in HTTP mode.
    """
    settings = BenchSettings.from_dict(job["settings"])
    platform = job["platform"]
    adapters: dict[str, Any] = {"terminal": {"enabled": False}}
    if platform != "core":
        adapters[platform] = _platform_section(job, settings)
    card: dict[str, Any] = {}
    event_loop = "auto"
    slots: dict[str, int] = {"max_concurrent_turns": max(64, int(job["n"]))} if platform == "core" else {}
    if settings.config:
        source = load_config(settings.config)
        card = source.card.model_dump(mode="json")
        event_loop = source.gateway.event_loop
        if platform != "core":
            slots = {"max_concurrent_turns": source.gateway.max_concurrent_turns}
        if platform != "core":
            adapters[platform]["policy"] = getattr(source.adapters, platform).policy.model_dump(mode="json")
    card.update({"footer": False, "show_thought": False})
    return parse_config(
        {
            "log": {"level": "warning"},
            "llm": {"provider": "custom", "base_url": job["llm_url"], "api_key": "bench", "model": BENCH_MODEL,
                    "max_rounds": settings.tool_rounds + 2},
            "memory": _memory_section(job),
            "gateway": {**slots, "workers": int(job.get("workers", 1)),
                        "replicas": int(job.get("replicas", 1)), "instance_id": job.get("instance_id", ""),
                        "event_loop": event_loop},
            "card": card,
            # The charts scenario turns them off for its baseline (the same metric tool, no picture).
            "tools": {"inventory": {"enabled": True, "path": str(INVENTORY)}, "charts": {"enabled": job.get("charts", True)}},
            "adapters": adapters,
        },
        env={},
    )


async def wait_for_line(word: str) -> None:
    """Until the orchestrator writes ``word`` on a line (or closes stdin)."""
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line or line.strip() == word:
            return


async def serve(job: dict[str, Any]) -> dict[str, Any]:
    """Run botgateway for one scenario until told to stop; the process's own numbers."""
    from botgateway.cli.collector import settle_after_startup

    # botgateway run's own start-up steps (private there; the bench takes the same, not a copy of them).
    from botgateway.cli.run import _recover, _take_moved, build_adapter
    from botgateway.cli.runtime import build_runtime

    config = bench_config(job)
    platform = job["platform"]
    async with build_runtime(config) as runtime:
        adapter = build_adapter(platform, getattr(config.adapters, platform), runtime)
        await adapter.start(runtime.gateway)
        # The cards a killed predecessor left open (the crash scenario) are resumed or closed now, and a crashed
        # replica's by the others while running, as botgateway run does.
        await _recover(runtime, [adapter])
        _take_moved(runtime, [adapter])
        settle_after_startup()  # start-up is over, as botgateway run marks it
        rss_ready = rss_bytes()
        cpu_ready = cpu_s()
        wall_ready = time.monotonic()
        print("ready", flush=True)
        try:
            await wait_for_line("stop")
        finally:
            cpu = cpu_s() - cpu_ready
            wall = time.monotonic() - wall_ready
            # botgateway run's shutdown: cards are finished while the adapter can still reach the platform.
            await runtime.gateway.aclose()
            await asyncio.wait_for(adapter.stop(), timeout=10)
    return {"pid": os.getpid(), "cpu_s": cpu, "wall_s": wall, "rss_ready_bytes": rss_ready, "peak_rss_bytes": peak_rss_bytes()}


def _quiet_logs() -> None:
    # Throttles are logged at info; thousands of lines would only cost CPU here. Warnings go to the stderr file.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker subprocess."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.worker JOB.json RESULT.json (started by python -m bench)", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    _quiet_logs()
    try:
        config = bench_config(job)
        # On the loop botgateway run serves on (gateway.event_loop).
        if job["platform"] == "core":
            from bench.core_worker import serve_core

            result = run(serve_core(job, config), config.gateway.event_loop)
        else:
            result = run(serve(job), config.gateway.event_loop)
    except Exception as exc:
        traceback.print_exc()
        print(f"worker failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    Path(args[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
