"""The plumbing every loopback fake shares: a threaded HTTP server on an ephemeral 127.0.0.1 port.

A fake subclasses :class:`LoopbackFake` and answers each request in
``_handle``; starting, stopping and the endpoint are written once here.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["LoopbackFake", "QuietServer"]


class QuietServer(ThreadingHTTPServer):
    """A threaded server whose request threads never keep the process alive."""

    daemon_threads = True
    # A burst of a fan-out's connections must not overflow the default backlog of 5: the refused attempt is retried
    # by the client a second later, which is the fake's doing, not the caller's.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer (a caller timing out, as tests make it) is not an error."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class LoopbackFake:
    """Start, stop and address a fake API; subclasses answer in :meth:`_handle` (GET and POST alike)."""

    thread_name = "loopback-fake"
    """Name of the serving thread (for a stack dump of a hung test)."""

    _server: QuietServer | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        """Listen on an ephemeral port."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # named as http.server calls it
                fake._handle(self)

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=self.thread_name)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError
