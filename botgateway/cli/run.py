"""``botgateway run`` and ``botgateway chat``: start the adapters and run until told to stop.

``run`` builds the runtime, starts every adapter ``config.yaml`` enables
(imported only when enabled, so an unused platform SDK is never loaded), finalizes cards a
crashed process left open (at start, then periodically while running), and
runs until SIGINT/SIGTERM — or until the user leaves the terminal chat.
The gateway's HTTP server (probes, metrics) starts first, so ``/healthz``
answers during start-up; ``/readyz`` turns ready once the adapters are up.

Shutdown drains: at the first SIGTERM or SIGINT readiness turns false, the
adapters stop taking questions (the platform delivers to other processes),
and the answers running or queued get ``gateway.drain_s`` to finish; a second
signal ends the wait. In a fleet (``memory.store: redis``) the questions that
have not started move to the other processes instead of waiting, and every
process that is not draining takes the questions moved to the platforms it
answers on. What is still running then is stopped, its card saying
that the bot restarted (while the adapters can still reach their platforms),
then the adapters stop and the store closes.

As worker ``i`` of ``botgateway run --workers`` (:mod:`botgateway.cli.supervisor`)
the process runs the same way, under the instance id ``<id>-w<i>``, with its
HTTP listeners sharing their ports with the other workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import structlog

from botgateway.cli.collector import settle_after_startup
from botgateway.cli.mcp_door import mount_mcp
from botgateway.cli.unprompted import close_alert_desk, start_unprompted, stop_schedules
from botgateway.config import Config, ConfigError
from botgateway.sink import Adapter

if TYPE_CHECKING:
    from botgateway.access import GroupResolver
    from botgateway.cli.runtime import Runtime
    from botgateway.cli.worker_link import WorkerLink
    from botgateway.fleet.handoff import MovedQuestion
    from botgateway.sink import CardSink

__all__ = [
    "ADAPTER_ORDER", "REDIS_RECOVERY_GRACE_S", "build_adapter", "chat", "enabled_adapters", "group_resolver", "run",
]

log = structlog.get_logger(__name__)

ADAPTER_ORDER = ("terminal", "slack", "dingtalk")
"""The chat adapters ``run`` knows, in start order (the web adapter follows them when the HTTP server serves it)."""

REDIS_RECOVERY_GRACE_S = 600.0
"""With a shared Redis store, an ownerless card (recorded without an instance id) younger than this may be another replica's."""


def _say(text: str) -> None:
    """A plain-words line for the operator on stderr (logs may be going to a file)."""
    print(text, file=sys.stderr, flush=True)


def enabled_adapters(config: Config) -> list[tuple[str, Any]]:
    """``(name, adapter config)`` of every enabled adapter, in start order."""
    # ``active``: ``enabled: auto`` starts an adapter only when its credentials are set.
    adapters = [(name, getattr(config.adapters, name)) for name in ADAPTER_ORDER]
    enabled: list[tuple[str, Any]] = [(name, adapter_config) for name, adapter_config in adapters if adapter_config.active]
    from botgateway.config.web import web_served

    if web_served(config):  # the HTTP API: on the gateway's HTTP server, when it runs
        enabled.append(("web", config.web))
    return enabled


def build_adapter(name: str, adapter_config: Any, runtime: Runtime) -> Adapter:
    """The adapter ``name`` built from its config section and the parts of ``runtime`` it needs."""
    if name == "terminal":
        from adapters.terminal import TerminalAdapter
        from adapters.terminal.chat import console_line

        # The console is served when the web adapter was built on the (started) HTTP server: the chat says where.
        http = runtime.http if runtime.web is not None else None
        hint = console_line(http.host, http.port, runtime.config.web) if http is not None else ""
        return TerminalAdapter(adapter_config, memory=runtime.memory, model_label=runtime.model_label,
                               console_hint=hint)
    # Worker processes of one host bind the same HTTP ports; the kernel spreads the connections.
    reuse_port = runtime.worker_index is not None
    if name == "slack":
        from adapters.slack import SlackAdapter
        from adapters.slack.adapter import web_client
        from botgateway.cards.caller import BudgetPacer

        client = web_client(adapter_config)  # built first: the group resolver shares it (its token and base URL)
        return SlackAdapter(adapter_config, store=runtime.store, client=client, pacer=BudgetPacer(runtime.budget),
                            groups=group_resolver(name, client, adapter_config, runtime.config), reuse_port=reuse_port,
                            lines=runtime.lines)
    if name == "dingtalk":
        from adapters.dingtalk import DingTalkAdapter
        from adapters.dingtalk.adapter import openapi_client

        api = openapi_client(adapter_config)  # one access token cache for cards and contact lookups
        from botgateway.cards.caller import BudgetPacer

        return DingTalkAdapter(adapter_config, gateway=runtime.gateway, api=api, pacer=BudgetPacer(runtime.budget),
                               groups=group_resolver(name, api, adapter_config, runtime.config), reuse_port=reuse_port)
    if name == "web" and runtime.web is not None:
        return runtime.web  # built with the HTTP server, its routes mounted before the server started
    raise ValueError(f"unknown adapter {name!r}")


def group_resolver(name: str, client: Any, adapter_config: Any, config: Config) -> GroupResolver | None:
    """The resolver of the groups ``config``'s policy names on platform ``name``, over the adapter's own API
    ``client`` (Slack user groups over its Web API client, DingTalk departments over its OpenAPI client); None
    when it names none there (nothing is ever looked up)."""
    from botgateway.access import DINGTALK_DEPT_PREFIX, SLACK_GROUP_PREFIX, effective_policy, policy_groups

    access = config.access
    ttl_s = effective_policy(access).group_cache_s
    resolver: GroupResolver
    if name == "slack" and (groups := policy_groups(access, SLACK_GROUP_PREFIX)):
        from adapters.slack.usergroups import SlackUserGroups

        resolver = SlackUserGroups(client, groups, ttl_s)
    elif name == "dingtalk" and (groups := policy_groups(access, DINGTALK_DEPT_PREFIX)):
        from adapters.dingtalk.departments import DingTalkDepartments

        resolver = DingTalkDepartments(client, groups, ttl_s, oapi_base_url=adapter_config.oapi_base_url)
    else:
        return None
    log.info("access.groups_resolved", adapter=name, groups=sorted(groups), cache_s=ttl_s)
    return resolver


async def _start_adapters(runtime: Runtime, stdin_is_tty: bool) -> tuple[list[Adapter], list[str]]:
    started: list[Adapter] = []
    failed: list[str] = []
    for name, adapter_config in enabled_adapters(runtime.config):
        if name == "terminal" and not stdin_is_tty:
            log.info("adapter.skipped", adapter=name, reason="stdin is not a terminal")
            continue
        try:
            adapter = build_adapter(name, adapter_config, runtime)
            await adapter.start(runtime.gateway)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            detail = str(exc) or type(exc).__name__
            log.error("adapter.start_failed", adapter=name, error=type(exc).__name__, detail=detail[:300])
            _say(f"botgateway: the {name} adapter could not start: {detail}")
            failed.append(name)
            continue
        log.info("adapter.started", adapter=name)
        started.append(adapter)
    return started, failed


def _sinks(adapters: list[Adapter]) -> dict[str, CardSink]:
    sinks: dict[str, CardSink] = {}
    for adapter in adapters:
        sink = getattr(adapter, "sink", None)
        if sink is not None:
            sinks[getattr(sink, "platform", adapter.name)] = sink
    return sinks


async def _recover(runtime: Runtime, adapters: list[Adapter]) -> None:
    """Close the cards crashed processes left open, now and periodically while running."""
    # Cards record their owner's instance id and are closed once it stops beating; ownerless ones need the age rule.
    grace = REDIS_RECOVERY_GRACE_S if runtime.config.memory.store == "redis" else 0.0
    sinks = _sinks(adapters)
    try:
        # at_start: the cards this instance id left before a restart are closed now, not after its heartbeat expires.
        await runtime.gateway.recovery.recover_open_cards(sinks, older_than_s=grace, at_start=True)
    except Exception as exc:  # recovery is best effort; it must not keep the bot from starting
        log.error("gateway.recover_failed", error=type(exc).__name__, exc_info=True)
    runtime.gateway.recovery.watch(sinks, older_than_s=grace)


def _take_moved(runtime: Runtime, adapters: list[Adapter]) -> None:
    """In a fleet, take the questions draining processes moved, answering each through its platform's sink."""
    if runtime.handoff is None:
        return
    from botgateway.cards.buffer_policy import BufferPolicy

    gateway = runtime.gateway
    # The policy each adapter gives its own questions: build_adapter leaves them their config section's.
    # Not the terminal nor the web: the asker sits at one process's terminal, or reads this process's stream.
    routes: dict[str, tuple[CardSink, BufferPolicy]] = {
        platform: (sink, BufferPolicy.from_config(getattr(runtime.config.adapters, platform).policy))
        for platform, sink in _sinks(adapters).items() if platform not in ("terminal", "web")
    }

    async def take(moved: MovedQuestion) -> None:
        sink, policy = routes[moved.msg.platform]
        await gateway.take_over(moved, sink, policy)

    runtime.handoff.serve(routes, take)


def _install_stop_signals(stop: asyncio.Event, again: asyncio.Event) -> list[signal.Signals]:
    """SIGINT and SIGTERM set ``stop``, and any later one ``again`` (two signals in a row count as two)."""
    loop = asyncio.get_running_loop()

    def signalled() -> None:
        (again if stop.is_set() else stop).set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, signalled)
            installed.append(sig)
    return installed


def _remove_signals(signals: list[signal.Signals]) -> None:
    loop = asyncio.get_running_loop()
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)


async def _start_http(runtime: Runtime) -> None:
    """Start the gateway's HTTP server, if it is configured; a port another program holds is a config problem."""
    if runtime.http is None:
        return
    try:
        await runtime.http.start()
    except OSError as exc:
        http = runtime.config.http
        # asyncio words it "error while attempting to bind on address …"; the errno's own words are shorter.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ConfigError([f"http.port: cannot listen on {http.host}:{http.port} ({reason}); choose another port"]) from None


async def _drain(runtime: Runtime, adapters: list[Adapter], skip: asyncio.Event) -> None:
    """Not ready from now on; the adapters take no new questions; the answers in progress get ``gateway.drain_s``
    to finish, or until ``skip`` is set (a second signal)."""
    if runtime.readiness is not None:
        runtime.readiness.start_draining()
    for adapter in adapters:
        try:
            await asyncio.wait_for(adapter.stop_receiving(), timeout=10)
        except Exception as exc:
            log.warning("adapter.stop_receiving_failed", adapter=adapter.name, error=type(exc).__name__)
    drain_s = runtime.config.gateway.drain_s
    drained = asyncio.ensure_future(runtime.gateway.drain(drain_s))
    skipped = asyncio.ensure_future(skip.wait())
    try:
        await asyncio.wait([drained, skipped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        skipped.cancel()
        if not drained.done():
            drained.cancel()
            log.warning("gateway.drain_skipped", reason="a second stop signal")
    if drained.done() and not drained.cancelled() and not drained.result():
        log.warning("gateway.drain_timeout", drain_s=drain_s, note="stopping the answers still running")


async def _shutdown(runtime: Runtime, adapters: list[Adapter]) -> None:
    # Cards are finalized while the adapters can still reach their platforms.
    try:
        await stop_schedules(runtime)
    except Exception as exc:
        log.error("schedules.close_failed", error=type(exc).__name__, exc_info=True)
    try:
        await runtime.gateway.aclose()
    except Exception as exc:
        log.error("gateway.close_failed", error=type(exc).__name__, exc_info=True)
    try:
        await close_alert_desk(runtime)
    except Exception as exc:
        log.error("alerts.close_failed", error=type(exc).__name__, exc_info=True)
    for adapter in reversed(adapters):
        try:
            await asyncio.wait_for(adapter.stop(), timeout=10)
        except Exception as exc:
            log.warning("adapter.stop_failed", adapter=adapter.name, error=type(exc).__name__, exc_info=not isinstance(exc, TimeoutError))
    log.info("botgateway.stopped")


def _startup_failed(exc: Exception) -> int:
    """Say why start-up failed in plain words (the traceback goes to the log only)."""
    log.error("botgateway.start_failed", error=type(exc).__name__, exc_info=True)
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    _say(f"botgateway: could not start: {detail}")
    return 1


async def run(config: Config, *, stdin_is_tty: bool | None = None, worker_index: int | None = None) -> int:
    """``botgateway run``: every enabled adapter until SIGINT/SIGTERM; 0 on a clean stop.

    ``worker_index``: run as that worker of ``botgateway run --workers``.
    """
    try:
        return await _run(config, stdin_is_tty=stdin_is_tty, worker_index=worker_index)
    except ConfigError:
        raise  # the CLI lists every config problem
    except Exception as exc:
        return _startup_failed(exc)


async def _run(config: Config, *, stdin_is_tty: bool | None = None, worker_index: int | None = None) -> int:
    from botgateway.cli.runtime import build_runtime
    from botgateway.cli.worker_link import WorkerLink

    tty = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    if not enabled_adapters(config):
        _say(
            "botgateway: no adapter is enabled; set adapters.terminal.enabled: true, or give Slack "
            "(SLACK_BOT_TOKEN and SLACK_APP_TOKEN) or DingTalk (DINGTALK_CLIENT_ID and DINGTALK_CLIENT_SECRET) "
            "credentials, which start those adapters when they are 'enabled: auto'"
        )
        return 1
    stop, again = asyncio.Event(), asyncio.Event()
    signals = _install_stop_signals(stop, again)
    link = WorkerLink() if worker_index is not None else None
    if link is not None:
        link.watch(stop.set)  # the supervisor is gone: drain as on SIGTERM
    try:
        async with build_runtime(config, worker_index=worker_index) as runtime:
            mount_mcp(runtime)  # /mcp beside the API, before the HTTP server starts
            await _start_http(runtime)
            adapters, failed = await _start_adapters(runtime, tty)
            if not adapters:
                if failed:
                    _say("botgateway: no adapter is running; fix the problems above and start again")
                else:
                    _say("botgateway: nothing to run: the terminal chat needs a terminal (stdin is not one) "
                         "and no other adapter is enabled")
                return 1
            await _recover(runtime, adapters)
            _take_moved(runtime, adapters)
            await start_unprompted(runtime, adapters)
            _serving(runtime, adapters, link)
            await _until_stopped(stop, adapters)
            stop.set()  # also when the terminal chat ended: a signal from now on ends the drain's wait
            # The terminal chat may have taken SIGINT over: ours again.
            signals = _install_stop_signals(stop, again)
            await _drain(runtime, adapters, again)
            await _shutdown(runtime, adapters)
            return 0
    finally:
        _remove_signals(signals)
        if link is not None:
            link.stop_watching()


def _serving(runtime: Runtime, adapters: list[Adapter], link: WorkerLink | None) -> None:
    """Start-up is over: ready (once the probes' checks pass), reported to the supervisor, told to the operator."""
    settle_after_startup()
    if runtime.readiness is not None:
        for adapter in adapters:
            runtime.readiness.watch(adapter)
        runtime.readiness.mark_started()
    names = ", ".join(a.name for a in adapters)
    log.info("botgateway.running", adapters=names, model=runtime.model_label, worker=runtime.worker_index)
    if link is not None:
        link.report_started()
    elif runtime.worker_index is None and not any(a.name == "terminal" for a in adapters):
        _say(f"botgateway: running ({names}); press Ctrl-C to stop")


async def _until_stopped(stop: asyncio.Event, adapters: list[Adapter]) -> None:
    """Until a stop signal, or until an adapter that can end on its own (the terminal chat) ends."""
    waiters = [asyncio.ensure_future(stop.wait())]
    for adapter in adapters:
        ended = getattr(adapter, "ended", None)
        if isinstance(ended, asyncio.Event):
            waiters.append(asyncio.ensure_future(ended.wait()))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def chat(config: Config) -> int:
    """``botgateway chat``: the interactive terminal chat, whatever ``adapters.terminal.enabled`` says."""
    try:
        return await _chat(config)
    except ConfigError:
        raise
    except Exception as exc:
        return _startup_failed(exc)


async def _chat(config: Config) -> int:
    from adapters.terminal import TerminalAdapter
    from botgateway.cli.runtime import build_runtime

    async with build_runtime(config) as runtime:
        adapter = TerminalAdapter(config.adapters.terminal, memory=runtime.memory, model_label=runtime.model_label)
        await _recover(runtime, [adapter])
        try:
            return await adapter.run_chat(runtime.gateway)
        finally:
            await runtime.gateway.aclose()
            await adapter.stop()
