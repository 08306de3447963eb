"""Which configurations can run as several worker processes, and why the others cannot.

``botgateway run --workers N`` (or ``gateway.workers``) starts N processes that
share the store, each with its own platform connections. Some sections cannot
be shared that way: SQLite is one process's store, the terminal chat has one
terminal, and Slack opens at most 10 Socket Mode connections per app. The
supervisor refuses the first and the last at start; ``check-config`` says the
same, and warns about the terminal and about a whole fleet's connections.
"""

from __future__ import annotations

from botgateway.config.schema import Config

__all__ = ["SLACK_SOCKET_CONNECTIONS", "worker_problems", "worker_warnings"]

SLACK_SOCKET_CONNECTIONS = 10
"""Socket Mode connections Slack allows one app at once; each worker opens one."""


def _slack_socket(config: Config) -> bool:
    slack = config.adapters.slack
    return slack.active and slack.mode == "socket"


def worker_problems(config: Config, workers: int, *, key: str = "gateway.workers") -> list[str]:
    """Why ``config`` cannot run as ``workers`` processes (empty when it can); ``key`` names where the count came from."""
    if workers <= 1:
        return []
    problems = []
    if config.memory.store == "sqlite":
        problems.append(
            f"{key}: {workers} worker processes need a store they share, and SQLite is one process's: "
            "set memory.store: redis and memory.redis_url (redis://host:6379/0), or run one worker"
        )
    if _slack_socket(config) and workers > SLACK_SOCKET_CONNECTIONS:
        problems.append(
            f"{key}: {workers} workers would open {workers} Slack Socket Mode connections, and Slack allows "
            f"{SLACK_SOCKET_CONNECTIONS} per app: use at most {SLACK_SOCKET_CONNECTIONS} workers, "
            "or adapters.slack.mode: http"
        )
    return problems


def worker_warnings(config: Config, workers: int) -> list[str]:
    """What will not work as the operator may expect with ``workers`` processes (the run still starts)."""
    warnings = []
    if workers > 1 and config.adapters.terminal.active:
        warnings.append(
            f"adapters.terminal: the terminal chat cannot run with {workers} worker processes (there is one "
            "terminal); botgateway run refuses to start from a terminal, and skips the chat otherwise. "
            "Set adapters.terminal.enabled: false, or use botgateway chat"
        )
    connections = workers * config.gateway.replicas
    if _slack_socket(config) and connections > SLACK_SOCKET_CONNECTIONS >= workers:
        warnings.append(
            f"gateway.replicas: {config.gateway.replicas} replicas × {workers} workers open {connections} Slack "
            f"Socket Mode connections, and Slack allows {SLACK_SOCKET_CONNECTIONS} per app: the ones past it are "
            "refused; use fewer, or adapters.slack.mode: http"
        )
    return warnings
