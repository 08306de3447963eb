"""The fake Slack's file uploads: ``files.getUploadURLExternal``, the upload URL, ``files.completeUploadExternal``.

It checks the two-step external upload the way Slack does: the upload URL is
served by the fake itself (on its loopback port) and takes one POST of exactly
the announced length; ``files.completeUploadExternal`` shares only files whose
bytes arrived, into one channel (and thread). Shared files are kept
(:attr:`FakeSlackFiles.shared`) with their channel, thread, title, alt text and
bytes, so a test can read what a person would see under the answer.
:meth:`FakeSlackFiles.fail_upload` makes the upload URL answer an HTTP error.
Per-method limits and injected ``ok: false`` errors are the fake Slack's own
(:meth:`~tests.fakes.slack.FakeSlack.fail`, ``limits``).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["MAX_ALT_TXT", "FakeSlackFiles", "SharedFile", "Upload"]

MAX_ALT_TXT = 1000
"""Slack refuses a longer ``alt_txt`` with ``alt_txt_too_large``."""


@dataclass
class Upload:
    """A file announced with ``files.getUploadURLExternal``."""

    id: str
    """The file id (``F…``)."""
    filename: str
    """Its name."""
    length: int
    """The length announced."""
    alt_txt: str
    """Its alt text."""
    secret: str
    """The last part of its upload URL."""
    data: bytes | None = None
    """The bytes POSTed to the upload URL, once they arrived."""
    shared: bool = False
    """Completed (a file is shared once)."""


@dataclass(frozen=True)
class SharedFile:
    """A file ``files.completeUploadExternal`` shared into a channel."""

    id: str
    """The file id."""
    channel: str
    """The channel it was shared into."""
    thread_ts: str | None
    """The thread it was shared into (None: top level)."""
    ts: str
    """The ts of the message that shows it (later than every message before it)."""
    title: str
    """Its title."""
    filename: str
    """Its file name."""
    alt_txt: str
    """Its alt text."""
    data: bytes
    """Its bytes."""


class FakeSlackFiles:
    """The upload side of the fake Slack; its ``m_*`` methods answer the Web API (a body dict, or an error code)."""

    def __init__(self, base: Callable[[], str], new_ts: Callable[[], str], on_change: Callable[[], None]) -> None:
        """``base`` is the fake's ``http://127.0.0.1:PORT``; ``new_ts`` gives message ts; ``on_change`` wakes
        whoever waits for the fake (:meth:`~tests.fakes.slack.FakeSlack.wait_for`)."""
        self._base = base
        self._new_ts = new_ts
        self._on_change = on_change
        self._ids = itertools.count(1)
        self.uploads: dict[str, Upload] = {}
        """Announced files by id."""
        self.shared: list[SharedFile] = []
        """Files shared, in order."""
        self.posts: list[tuple[str, int]] = []
        """Every POST to an upload URL: (file id or ``?``, HTTP status answered)."""
        self._upload_failures: deque[int] = deque()

    def fail_upload(self, status: int = 500, *, times: int = 1) -> None:
        """Make the next ``times`` POSTs to upload URLs answer HTTP ``status``."""
        self._upload_failures.extend([status] * times)

    def in_thread(self, channel: str, thread_ts: str | None) -> list[SharedFile]:
        """Files shared into ``channel`` under ``thread_ts`` (None: top level), in order."""
        return [f for f in self.shared if f.channel == channel and f.thread_ts == thread_ts]

    def add_routes(self, app: web.Application) -> None:
        """Serve the upload URLs on the fake's own server."""
        app.router.add_post("/upload/v1/{secret}", self._receive)

    # --- Web API ------------------------------------------------------------------

    def m_get_upload_url(self, args: dict[str, Any]) -> dict[str, Any] | str:
        """``files.getUploadURLExternal``: an upload URL on this fake and a file id."""
        filename = str(args.get("filename") or "")
        try:
            length = int(args.get("length") or 0)
        except ValueError:
            return "invalid_arguments"
        if not filename:
            return "invalid_arguments"
        if length <= 0:
            return "missing_argument"
        alt = str(args.get("alt_txt") or "")
        if len(alt) > MAX_ALT_TXT:
            return "alt_txt_too_large"
        upload = Upload(f"F{next(self._ids):08d}", filename, length, alt, secrets.token_hex(8))
        self.uploads[upload.id] = upload
        return {"upload_url": f"{self._base()}/upload/v1/{upload.secret}", "file_id": upload.id}

    def m_complete(self, args: dict[str, Any]) -> dict[str, Any] | str:
        """``files.completeUploadExternal``: share every uploaded file of ``files`` into one channel (and thread)."""
        try:
            files = json.loads(args["files"]) if isinstance(args.get("files"), str) else args.get("files")
        except ValueError:
            return "invalid_arguments"
        if not isinstance(files, list) or not files or not all(isinstance(f, dict) and f.get("id") for f in files):
            return "invalid_arguments"
        channel = str(args.get("channel_id") or "")
        thread_ts = str(args.get("thread_ts") or "") or None
        if args.get("channels") or (thread_ts and not channel):
            return "invalid_arguments"  # a thread needs exactly one channel: channel_id
        uploads = [self.uploads.get(str(f["id"])) for f in files]
        if any(u is None or u.data is None or u.shared for u in uploads):
            return "file_not_found"
        done = []
        for upload, spec in zip(uploads, files, strict=True):
            assert upload is not None and upload.data is not None
            upload.shared = True
            title = str(spec.get("title") or upload.filename)
            if channel:
                self.shared.append(SharedFile(upload.id, channel, thread_ts, self._new_ts(), title, upload.filename,
                                              upload.alt_txt, upload.data))
            done.append({"id": upload.id, "title": title, "name": upload.filename})
        return {"files": done}

    # --- the upload URL ---------------------------------------------------------------

    async def _receive(self, request: web.Request) -> web.Response:
        upload = next((u for u in self.uploads.values() if u.secret == request.match_info["secret"]), None)
        status, text = self._accept(upload, await request.read())
        self.posts.append((upload.id if upload else "?", status))
        self._on_change()
        return web.Response(status=status, text=text)

    def _accept(self, upload: Upload | None, data: bytes) -> tuple[int, str]:
        if self._upload_failures:
            return self._upload_failures.popleft(), "upload service unavailable"
        if upload is None:
            return 404, "unknown upload URL"
        if upload.data is not None:
            return 400, "already uploaded"
        if len(data) != upload.length:
            return 400, f"length {len(data)} is not the {upload.length} announced"
        upload.data = data
        return 200, f"OK - {len(data)}"
