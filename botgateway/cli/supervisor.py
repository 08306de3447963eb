"""``botgateway run --workers N``: a small supervisor that keeps N worker processes running.

Each worker is ``python -m botgateway.cli run [-c CONFIG] --worker-index i``:
the very command an operator runs, so a worker loads the config, logs and
fails exactly as a single process does, and nothing (config objects with
secrets, an event loop, open sockets) is pickled or forked across. Its instance
id is the process's id with ``-w<i>`` appended, stable across restarts, so
each worker owns its own open cards and a restarted worker closes what it left.

The supervisor forwards SIGTERM and SIGINT to every worker (each drains, see
:mod:`botgateway.cli.run`; a second signal is forwarded too and skips the
drain's wait) and waits for them. A worker that dies on its own is restarted
after the core :class:`~botgateway.backoff.Backoff`; one that dies
:data:`START_ATTEMPTS` times in a row before it served (it reports that on its
:mod:`link <botgateway.cli.worker_link>`) means the configuration or the
platform keeps it from starting: the supervisor stops the others and exits 1.

With ``metrics.enabled`` the workers count into files of one directory the
supervisor makes (``PROMETHEUS_MULTIPROC_DIR``), so a scrape of the shared
port sums every worker (see :mod:`botgateway.http.metrics`); the directory is
removed when the supervisor ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from botgateway.backoff import Backoff
from botgateway.cli.worker_link import STARTED, link_pair
from botgateway.config import Config, ConfigError, worker_problems

__all__ = ["RESTART_BACKOFF", "STABLE_S", "START_ATTEMPTS", "Supervisor", "supervise", "worker_command"]

log = structlog.get_logger(__name__)

RESTART_BACKOFF = Backoff(base_s=0.5, max_s=30.0)
"""Wait before restarting a worker: 0.5 s after its first failure, doubling up to 30 s while it keeps failing to start."""

STABLE_S = 60.0
"""A worker that served this long before it died is restarted at once; one that died sooner, after the backoff."""

START_ATTEMPTS = 5
"""A worker that fails this many starts in a row makes the supervisor give up."""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def worker_command(config_path: str | None, index: int, workers: int) -> list[str]:
    """The command line of worker ``index`` of ``workers`` (the same config file as the supervisor's).

    The count goes along because a worker spends its share of each rate limit when Redis is unreachable.
    """
    config = ["-c", config_path] if config_path else []
    return [sys.executable, "-m", "botgateway.cli", "run", *config, "--workers", str(workers), "--worker-index", str(index)]


async def supervise(
    config: Config, *, config_path: str | None, workers: int, key: str = "gateway.workers", stdin_is_tty: bool | None = None
) -> int:
    """Refuse what cannot run as ``workers`` processes (a :class:`ConfigError`), else run them until SIGTERM/SIGINT."""
    problems = worker_problems(config, workers, key=key)
    tty = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    if tty and config.adapters.terminal.active:
        problems.append(
            f"adapters.terminal: the terminal chat cannot run with {workers} worker processes (there is one terminal): "
            "set adapters.terminal.enabled: false to run the workers, or use one worker for the chat"
        )
    if problems:
        raise ConfigError(problems, config_path or "config.yaml")
    metrics_dir = tempfile.mkdtemp(prefix="botgateway-metrics-") if config.metrics.enabled else None
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": metrics_dir} if metrics_dir else None
    try:
        return await Supervisor(lambda index: worker_command(config_path, index, workers), workers, env=env).run()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


@dataclass(frozen=True)
class _Worker:
    """One running worker process and the supervisor's end of its link."""

    index: int
    """Which worker it is (``--worker-index``)."""
    process: asyncio.subprocess.Process
    """The process."""
    link: socket.socket
    """The supervisor's end of its stdin (:mod:`botgateway.cli.worker_link`)."""


class Supervisor:
    """Starts ``workers`` processes of ``command(index)``, forwards stop signals, restarts the ones that die.

    ``env``: the workers' environment (default: the supervisor's own).
    """

    def __init__(
        self,
        command: Callable[[int], Sequence[str]],
        workers: int,
        *,
        backoff: Backoff = RESTART_BACKOFF,
        start_attempts: int = START_ATTEMPTS,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._command = command
        self._env = dict(env) if env is not None else None
        self._workers = workers
        self._backoff = backoff
        self._start_attempts = start_attempts
        self._running: dict[int, _Worker] = {}
        self._stopping = asyncio.Event()
        self._signals = 0
        self._gave_up = False
        self._served: set[int] = set()

    async def run(self) -> int:
        """Run until told to stop (or until a worker keeps failing to start); 0 when every worker stopped cleanly."""
        installed = self._install_signals()
        log.info("supervisor.starting", workers=self._workers)
        try:
            codes = await asyncio.gather(*(self._keep(index) for index in range(self._workers)))
        finally:
            loop = asyncio.get_running_loop()
            for sig in installed:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
        clean = not self._gave_up and all(code == 0 for code in codes)
        log.info("supervisor.stopped", exit_codes=codes, clean=clean)
        return 0 if clean else 1

    def _install_signals(self) -> list[signal.Signals]:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        log.info("supervisor.signal", signal=sig.name, count=self._signals, workers=len(self._running))
        self.stop(sig)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Restart no worker any more, and pass ``sig`` to every running one (a second stop skips their drain's wait)."""
        self._stopping.set()
        for worker in self._running.values():
            if worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(sig)

    async def _keep(self, index: int) -> int | None:
        """Keep worker ``index`` running until the stop; its last exit code."""
        failed_starts = quick_deaths = 0
        code: int | None = None
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            worker = await self._spawn(index)
            started = loop.time()
            try:
                served = await self._served_or_exited(worker)
                if served:
                    failed_starts = 0
                    self._note_serving(index)
                code = await worker.process.wait()
            finally:
                self._running.pop(index, None)
                worker.link.close()
            if self._stopping.is_set():
                break
            if not served:
                failed_starts += 1
            # One that serves and dies soon again (a poison message redelivered at each connect) backs off too.
            quick_deaths = quick_deaths + 1 if served and loop.time() - started < STABLE_S else 0
            log.error("supervisor.worker_died", worker=index, exit_code=code, served=served,
                      failed_starts=failed_starts, quick_deaths=quick_deaths)
            if failed_starts >= self._start_attempts:
                self._give_up(index, code)
                break
            await self._pause(self._backoff.delay(max(failed_starts, quick_deaths, 1) - 1))
        return code

    async def _spawn(self, index: int) -> _Worker:
        mine, theirs = link_pair()
        try:
            # Its own session: a terminal's Ctrl-C reaches the supervisor alone, which forwards it once.
            process = await asyncio.create_subprocess_exec(
                *self._command(index), stdin=theirs.fileno(), start_new_session=True, env=self._env
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        worker = _Worker(index, process, mine)
        self._running[index] = worker
        log.info("supervisor.worker_spawned", worker=index, pid=process.pid)
        if self._stopping.is_set():  # a signal came while it was being spawned
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        return worker

    async def _served_or_exited(self, worker: _Worker) -> bool:
        """True once the worker reports that it serves; False when it exits first."""
        loop = asyncio.get_running_loop()
        worker.link.setblocking(False)
        report = asyncio.ensure_future(_read_line(loop, worker.link))
        exited = asyncio.ensure_future(worker.process.wait())
        try:
            await asyncio.wait({report, exited}, return_when=asyncio.FIRST_COMPLETED)
            # A report and an exit at the same moment: the report counts.
            return report.done() and not report.cancelled() and report.exception() is None and report.result() == STARTED
        finally:
            report.cancel()
            exited.cancel()

    def _note_serving(self, index: int) -> None:
        log.info("supervisor.worker_serving", worker=index)
        first_time = index not in self._served
        self._served.add(index)
        if first_time and len(self._served) == self._workers:
            _say(f"botgateway: running {self._workers} worker processes; press Ctrl-C to stop")

    def _give_up(self, index: int, code: int | None) -> None:
        self._gave_up = True
        log.error("supervisor.gave_up", worker=index, attempts=self._start_attempts, exit_code=code)
        _say(f"botgateway: worker {index} failed to start {self._start_attempts} times in a row (last exit code {code}); "
             "see its messages above. Stopping the other workers.")
        self.stop(signal.SIGTERM)

    async def _pause(self, seconds: float) -> None:
        """Wait before a restart, or until the stop, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)


async def _read_line(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first line on ``sock`` (what came before the end, when it ends first)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = await loop.sock_recv(sock, 64)
        if not chunk:
            break
        data += chunk
    return data
