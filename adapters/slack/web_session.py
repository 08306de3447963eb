"""The Web API client's HTTP session: every call reuses kept-alive connections to Slack.

Without a session of its own, slack-sdk's ``AsyncWebClient`` opens a new
aiohttp session for every call: a new connection, a TLS handshake with
slack.com, closed once the call is answered. In a burst (a hundred questions
at once, each with a reaction, a message and its updates) that is hundreds of
handshakes, paid in latency and in the CPU the answers need. The adapter gives
its client one pooled session while it runs (:func:`attach_session`) and
closes it when it stops (:func:`detach_session`); a call made after that (a
card finished late) falls back to slack-sdk's own one-off session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["MAX_CONNECTIONS", "attach_session", "detach_session"]

MAX_CONNECTIONS = 128
"""Connections to Slack open at once; more calls in flight wait for one (Slack's limits keep far fewer in flight
outside a burst)."""


def attach_session(client: AsyncWebClient) -> bool:
    """Give ``client`` a pooled session with its own timeout, unless it has one (given by whoever built it); True
    when one was attached (then :func:`detach_session` closes it)."""
    if client.session is not None and not client.session.closed:
        return False
    client.session = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=client.timeout),
        connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
    )
    return True


async def detach_session(client: AsyncWebClient) -> None:
    """Close the session :func:`attach_session` gave ``client``; its later calls open one-off sessions again."""
    session, client.session = client.session, None
    if session is not None:
        await session.close()
