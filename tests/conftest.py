"""Shared test settings: every test runs against loopback services only."""

from __future__ import annotations

import os

# Tests must never pick up a developer's real credentials from the environment.
for _name in list(os.environ):
    if _name.startswith(("LLM_", "SLACK_", "DINGTALK_", "ALIBABA_CLOUD_", "TENCENTCLOUD_", "OPENAI_")):
        del os.environ[_name]


def pytest_unconfigure(config: object) -> None:
    """Fail loudly, instead of hanging at exit, when a test leaks a non-daemon thread.

    An unclosed aiosqlite connection or server thread keeps the interpreter alive
    forever after the last test; CI would only see a time-out.
    """
    import sys
    import threading

    leaked = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for thread in leaked:
        thread.join(timeout=2)
    leaked = [t for t in leaked if t.is_alive()]
    if leaked:
        names = ", ".join(t.name for t in leaked)
        sys.stderr.write(f"\nERROR: tests left non-daemon threads running ({names}); close what you open.\n")
        sys.stderr.flush()
        os._exit(3)
