"""A tool with a side effect, for the approval tests: it records every host it "restarts"."""

from __future__ import annotations

from typing import Any

from botgateway.tooling import tool

__all__ = ["restart_tool"]


def restart_tool(restarts: list[str]) -> Any:
    """A ``restart_server`` tool that appends each host it restarts to ``restarts``: proof a call ran, or did not."""

    @tool
    def restart_server(host: str) -> str:
        """Restart a server (a call that needs an approval in the approval tests).

        Args:
            host: Server name.
        """
        restarts.append(host)
        return f"{host} restarted"

    return restart_server
