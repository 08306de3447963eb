"""Sections of the service itself: logging, the state store, turn scheduling, the HTTP server and metrics."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from botgateway.config.section import Section
from botgateway.redis_url import parse_redis_url

__all__ = ["MAX_WORKERS", "GatewayConfig", "HttpConfig", "LogConfig", "MemoryConfig", "MetricsConfig"]

MAX_WORKERS = 32
"""Most worker processes ``gateway.workers`` allows (far more than the cores a gateway host has)."""


class LogConfig(Section):
    """Structured logging."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written."""
    format: Literal["auto", "json", "console"] = "auto"
    """``json`` lines for production, ``console`` for people; ``auto`` picks console on a terminal."""
    file: str | None = None
    """Write logs to this file instead of stderr (the terminal chat sets this by default)."""


class MemoryConfig(Section):
    """Conversation history, dedupe keys, open cards and audit records."""

    store: Literal["sqlite", "redis"] = "sqlite"
    """``sqlite`` (embedded, one process) or ``redis`` (several replicas)."""
    sqlite_path: str = "data/botgateway.db"
    """SQLite file, created on first use."""
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    """Where Redis is (may carry a password, so it is secret).

    ``redis://[[user]:password@]host[:port][/db]`` (``rediss://`` for TLS),
    ``unix:///path/to/redis.sock``, or, for the master a group of Redis
    Sentinels names, ``redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/service_name[/db]``
    (``rediss+sentinel://`` for TLS; Sentinels on port 26379 unless given; the
    user and password are the master's, ``?sentinel_password=…`` the Sentinels').
    Redis Cluster is not supported.
    """
    redis_prefix: str = "botgateway:"
    """Key prefix, so several deployments can share one Redis."""
    max_history_tokens: int = Field(6000, ge=200)
    """Token budget of the history sent to the model; older turns are summarized past it."""
    keep_recent_turns: int = Field(2, ge=1)
    """Turns never summarized away."""
    dedupe_ttl_s: float = Field(3600.0, gt=0)
    """How long a platform message id is remembered to drop redeliveries."""
    history_ttl_days: float = Field(30.0, gt=0)
    """Conversations idle longer than this are forgotten."""
    history_cache_size: int = Field(2000, ge=0)
    """Conversations whose history is kept in memory (least recently used dropped first); 0 reads each from the store.

    With ``store: redis`` every read of a kept history still asks Redis whether
    another replica changed it (one small round trip); with SQLite it asks nothing.
    """

    @field_validator("redis_url")
    @classmethod
    def _a_known_url_form(cls, value: SecretStr, info: ValidationInfo) -> SecretStr:
        # An empty URL is no mistake while nothing uses it (store: sqlite with an unset ${REDIS_URL:-}).
        url = value.get_secret_value()
        if url or info.data.get("store") == "redis":
            parse_redis_url(url)  # its message names no part of the URL: the password could be anywhere in it
        return value


class GatewayConfig(Section):
    """Turn scheduling and access."""

    max_queued_per_conversation: int = Field(3, ge=0)
    """Questions waiting behind a running turn in one conversation; more are refused politely."""
    max_concurrent_turns: int = Field(128, ge=1)
    """Turns running at once in this process; more wait for a slot, their cards saying their place, and each asker
    holds at most ``limits.max_slot_share`` of them.

    A turn holds its slot while the model writes and the tools run, not while its card waits for a platform's
    budget, so the slots are sized for a burst's generation: a hundred questions at once (an incident) all start
    writing at once. With 64, the 36 past them waited a whole generation first: Slack N=100 took p95 14.8 s
    where 128 take 8.2 s. The platforms' budgets carry that burst by themselves: their planner defers live
    updates, never finals, and DingTalk's 20 calls a second take 100 answers' two calls each in 10 s whatever
    the slots. A running turn costs a task and its model stream, a few hundred KB; lower this for a model
    provider that takes fewer requests at once."""
    max_question_chars: int = Field(20_000, ge=100)
    """Longest question accepted, in characters; a longer one is refused with a note saying the limit, and never reaches the model."""
    admins: list[str] = Field(default_factory=list)
    """Platform user ids allowed to stop anyone's turn."""
    stop_words: list[str] = Field(default_factory=lambda: ["stop", "停止", "/stop"])
    """A message that is exactly one of these stops the asker's running turn."""
    clear_words: list[str] = Field(default_factory=lambda: ["/clear", "/new", "新对话", "清空对话"])
    """A message that is exactly one of these starts a new conversation (forgets its history)."""
    heartbeat_s: float = Field(10.0, gt=0)
    """How often a running process tells the store it is alive (its open cards are then left alone)."""
    instance_ttl_s: float = Field(30.0, gt=0)
    """A process silent this long counts as crashed: other processes finalize its open cards."""
    recover_interval_s: float = Field(30.0, gt=0)
    """How often a running process looks for cards left open by a crashed process."""
    instance_id: str = Field(
        "",
        max_length=200,
        pattern=r"^([A-Za-z0-9][A-Za-z0-9._:-]*)?$",
        description=(
            "This process's identity, the owner of its open cards; kept across restarts so a restarted process "
            "closes the cards it left at once. Empty: derived (see botgateway.instance). Must differ per replica."
        ),
    )
    """This process's identity, the owner of its open cards, kept across restarts (empty: derived).

    A restarted process closes at once, at start-up, the cards its predecessor
    under the same id left open; other replicas wait for ``instance_ttl_s``.
    Empty: with SQLite, an id made on first start and kept next to the
    database file; with Redis, the pod name (``POD_NAME``) or host name
    (``HOSTNAME``). Two live processes never share an id: one already in use on
    this host (a lock file) gives the second process a random id.
    """

    workers: int = Field(1, ge=1, le=MAX_WORKERS)
    """Worker processes ``botgateway run`` starts (``--workers`` overrides it); each uses one core.

    Above 1 the workers must share a store, so ``memory.store: redis`` is
    required. Each worker opens its own Slack Socket Mode and DingTalk Stream
    connection (Slack allows at most 10 Socket Mode connections per app), and
    the HTTP listeners (the gateway's HTTP server, Slack HTTP mode, DingTalk
    callbacks) are bound by every worker on the same port (``SO_REUSEPORT``).
    A worker's instance id is the process's id with ``-w<index>`` appended.
    """
    event_loop: Literal["auto", "asyncio"] = "auto"
    """The event loop ``botgateway run`` serves on: ``auto``, uvloop where it is installed (it is a dependency
    on Linux and macOS: each chunk and card call costs less CPU), else asyncio's own; ``asyncio``, always
    asyncio's own."""
    drain_s: float = Field(30.0, gt=0)
    """On SIGTERM or SIGINT, how long running and queued answers may take to finish before they are stopped.

    Readiness turns false at once and the adapters stop taking questions; what is
    still running after this long is stopped, its card saying the bot restarted.
    A second signal stops them at once. Give the platform (Kubernetes'
    ``terminationGracePeriodSeconds``) a little more than this.

    With ``memory.store: redis`` the questions still waiting (not started) are
    not kept for this wait: they move to the other processes of the fleet at
    once, and their cards here say so.
    """
    handoff_max_age_s: float = Field(600.0, gt=0)
    """With ``memory.store: redis``, how old a question moved by a draining process may be when another takes it.

    Older (nobody was there to take it: the whole fleet restarted at once), it is
    not answered any more and its asker is asked to ask again.
    """
    resume_within_s: float = Field(300.0, ge=0)
    """How old a question may be for the process that recovers it to answer it again after a crash (0: never).

    A question whose process died while answering (a crash, ``kill -9``, a lost node) is run again once, by
    whichever process finds its card left open: the same one restarted, or another replica. Only when every tool
    call it had made only reads, and no call waited for an approval; its card says it was resumed after a restart,
    and the answer goes into it. An older question, or a turn that may have changed something, has its card
    closed with the reason, as is a resumed turn interrupted again.
    """
    replicas: int = Field(1, ge=1)
    """How many gateway processes are expected to run at once (replicas × workers), sharing the platforms' rate limits.

    When the shared budget in Redis cannot be reached, each process falls back
    to a local budget of the platform's rate divided by this.
    """

    @model_validator(mode="after")
    def _ttl_outlives_heartbeats(self) -> GatewayConfig:
        if self.instance_ttl_s <= self.heartbeat_s:
            raise ValueError(
                f"instance_ttl_s ({self.instance_ttl_s:g}) must be longer than heartbeat_s ({self.heartbeat_s:g}), "
                "or live processes would look crashed between heartbeats; use about three heartbeats"
            )
        return self


class HttpConfig(Section):
    """The gateway's own HTTP server: ``/healthz``, ``/readyz`` and, with ``metrics.enabled``, ``/metrics``."""

    enabled: bool = False
    """Serve the probes on ``http://host:port``; ``metrics.enabled`` starts the server too."""
    host: str = "127.0.0.1"
    """Listen address: this host only by default; another address serves the web API only with auth (``web:``)."""
    port: int = Field(9464, ge=0, le=65535)
    """Listen port (0 picks a free one); every worker process binds it (``SO_REUSEPORT``)."""


class MetricsConfig(Section):
    """Prometheus metrics."""

    enabled: bool = False
    """Serve Prometheus metrics on the gateway's HTTP server (``http.host``:``http.port``), at ``/metrics``."""
