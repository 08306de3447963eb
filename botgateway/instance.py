"""Which gateway process this is: an instance id that outlives a restart, never held by two live processes.

The instance id owns the process's open cards (:mod:`botgateway.cards.recovery`). When
it survives a restart, the restarted process closes what its predecessor left
open at once, instead of waiting for the dead process's heartbeat to expire.

Where the id comes from:

- ``gateway.instance_id`` when configured;
- with SQLite, an id made on the first start (host name plus a random suffix)
  and kept next to the database file (``<sqlite_path>.instance``);
- with Redis, the pod name (``POD_NAME``), else the host name (``HOSTNAME``, or
  the system's), which a restarted container keeps;
- a worker process of ``botgateway run --workers`` appends ``-w<index>`` to it.

Two live processes must never share an id (each would close the other's live
cards at its start). So the id is held under an exclusive lock file (next to
the SQLite file, or in the temporary folder for Redis) for the life of the
process: a second process on this host that finds it held, or that cannot take
the lock, runs under a random id instead (its own cards are then closed by the
heartbeat rule only). Replicas on different hosts differ by host or pod name;
replicas that share a host name must be given distinct ``gateway.instance_id``.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import structlog

from botgateway.config import GatewayConfig, MemoryConfig

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, so never a lasting id
    fcntl = None  # type: ignore[assignment]

__all__ = ["InstanceClaim", "claim_instance_id", "host_name"]

log = structlog.get_logger(__name__)


class InstanceClaim:
    """This process's instance id, and the lock that keeps it its own until :meth:`release`."""

    def __init__(self, instance_id: str, lock: IO[bytes] | None = None) -> None:
        self.instance_id = instance_id
        """The id: the owner of this process's open cards."""
        self.lasting = lock is not None
        """True when the id outlives this process (a restart reuses it); False for a random one."""
        self._lock = lock

    def release(self) -> None:
        """Let the id go (a clean shutdown; a killed process lets it go with its open files). Idempotent."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()


def host_name(environ: Mapping[str, str] = os.environ) -> str:
    """The pod name (``POD_NAME``), else ``HOSTNAME``, else the system's host name, as an id part."""
    return _as_id(environ.get("POD_NAME") or environ.get("HOSTNAME") or socket.gethostname()) or "botgateway"


def _as_id(text: str) -> str:
    """``text`` in the characters ``gateway.instance_id`` allows, at most 200 of them."""
    return re.sub(r"[^A-Za-z0-9._:-]+", "-", text).strip("-.:_")[:200]


def claim_instance_id(
    gateway: GatewayConfig, memory: MemoryConfig, *, environ: Mapping[str, str] = os.environ,
    worker_index: int | None = None,
) -> InstanceClaim:
    """Claim this process's instance id (see the module docstring); never raises, a random id is the fallback.

    ``worker_index``: the process is that worker of ``botgateway run --workers``, and its id is the one above
    with ``-w<index>`` appended, so each worker owns its own cards and keeps its id across restarts.
    """
    if memory.store == "sqlite":
        path = memory.sqlite_path
        if path == ":memory:" or path.startswith("file:"):
            return _random("the SQLite store is not a file")
        database = Path(path).expanduser().resolve()
        folder, scope = database.parent, str(database)
    else:
        folder, scope = Path(tempfile.gettempdir()), f"redis {memory.redis_prefix}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        instance_id = gateway.instance_id or _derived(memory, folder, environ)
        if worker_index is not None:
            instance_id = f"{instance_id}-w{worker_index}"
        lock = _lock(folder / f"botgateway-instance-{_digest(scope, instance_id)}.lock")
    except OSError as exc:
        return _random(f"cannot keep an id in {folder}: {exc.strerror or exc}")
    if lock is None:
        return _random(f"the instance id {instance_id!r} is held by another live process on this host")
    log.info("gateway.instance", instance_id=instance_id)
    return InstanceClaim(instance_id, lock)


def _derived(memory: MemoryConfig, folder: Path, environ: Mapping[str, str]) -> str:
    """The id made from where the process runs: kept with the SQLite data, or the pod / host name with Redis."""
    if memory.store != "sqlite":
        return host_name(environ)
    kept = folder / (Path(memory.sqlite_path).name + ".instance")
    made = f"{host_name(environ)}-{uuid.uuid4().hex[:8]}"
    try:
        # Exclusive create: of two first starts at once, both read the one id written first.
        with open(kept, "x", encoding="utf-8") as file:
            file.write(made + "\n")
    except FileExistsError:
        pass
    return _as_id(kept.read_text(encoding="utf-8")) or made


def _lock(path: Path) -> IO[bytes] | None:
    """The open, exclusively locked ``path``; None when another process holds it (or locks are unavailable)."""
    if fcntl is None:
        return None
    file = open(path, "ab")  # held open for the life of the process, not in a with block
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.close()
        return None
    except OSError:
        file.close()
        raise
    return file


def _digest(scope: str, instance_id: str) -> str:
    return hashlib.sha256(f"{scope}\0{instance_id}".encode()).hexdigest()[:16]


def _random(reason: str) -> InstanceClaim:
    instance_id = uuid.uuid4().hex
    # Not a warning: a CLI next to the running server is an ordinary reason.
    log.info("gateway.instance_random", instance_id=instance_id, reason=reason,
             note="cards this process leaves open are closed once its heartbeat expires")
    return InstanceClaim(instance_id)
