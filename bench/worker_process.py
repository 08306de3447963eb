"""The worker subprocess of a scenario, seen from the orchestrator: start it, stop it, read its numbers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["STARTUP_TIMEOUT_S", "WorkerFailed", "WorkerProcess"]

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 60.0
"""How long a worker may take to build its runtime and say ``ready``."""


class WorkerFailed(RuntimeError):
    """A scenario's worker crashed, did not start or timed out; the message carries its last stderr lines."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return ("\n" + "\n".join(text[-lines:])) if text else ""


class WorkerProcess:
    """``python -m bench.worker`` for one scenario: start, wait for ``ready``, ``stop``, read its numbers.

    ``env``: variables set for the worker on top of the orchestrator's environment.
    """

    def __init__(self, job: dict[str, Any], folder: Path, *, env: Mapping[str, str] | None = None) -> None:
        self._job = job
        self._extra_env = dict(env or {})
        self._folder = folder
        self._errors = folder / "worker.stderr.txt"
        self._result = folder / "worker.result.json"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Spawn the worker and wait until it says ``ready`` (its adapter is up, or a core worker is warmed up)."""
        job = self._folder / "worker.job.json"
        job.write_text(json.dumps(self._job))
        env = {**os.environ, **self._extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        with self._errors.open("wb") as stderr:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.worker", str(job), str(self._result),
                cwd=str(REPO_ROOT), env=env, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), STARTUP_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            await self.kill()
            raise WorkerFailed(f"the worker did not start{_tail(self._errors)}")

    async def stop(self, timeout: float = 60.0, *, command: str = "stop") -> dict[str, Any]:
        """Ask the worker to shut down as ``botgateway run`` does; its CPU and RSS numbers.

        A ``core`` worker is sent ``go`` instead: it runs its turns, then shuts down by itself.
        """
        self.tell(command)
        return await self.finish(timeout)

    def tell(self, command: str) -> None:
        """Write ``command`` on the worker's stdin now, without waiting (several workers are told ``go`` at once)."""
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(f"{command}\n".encode())

    async def finish(self, timeout: float = 60.0) -> dict[str, Any]:
        """After :meth:`tell`: wait until the worker exits (killed after ``timeout``); its numbers."""
        assert self._proc is not None and self._proc.stdin is not None
        try:
            await self._proc.stdin.drain()
            self._proc.stdin.close()
            code = await asyncio.wait_for(self._proc.wait(), timeout)
        except (TimeoutError, ConnectionError):
            await self.kill()
            raise WorkerFailed(f"the worker did not stop within {timeout:g} s{_tail(self._errors)}") from None
        if code != 0 or not self._result.exists():
            raise WorkerFailed(f"the worker exited with code {code}{_tail(self._errors)}")
        return json.loads(self._result.read_text())

    @property
    def pid(self) -> int | None:
        """The worker's process id once started."""
        return None if self._proc is None else self._proc.pid

    async def kill(self) -> None:
        """Kill the worker (``SIGKILL``, as ``kill -9``) if it still runs (never outlive the fakes it talks to)."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await asyncio.shield(self._proc.wait())

    def warnings(self, limit: int = 5) -> list[str]:
        """The worker's last warning and error lines (botgateway logs them to stderr)."""
        try:
            lines = self._errors.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line[:300] for line in lines if line.strip()][-limit:]
