"""The terminal chat's one line about the web console: where it is served and how to log in, only when it is."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from adapters.terminal.chat import console_line
from botgateway.config.web import ApiKeyConfig, WebConfig
from botgateway.password_hash import hash_password
from tests.adapters.terminal.test_terminal import ROOT, Pty, _exit_code
from tests.ports import free_port

HASH = hash_password("correct horse battery")
KEY = ApiKeyConfig.model_validate({"name": "ci", "key": "k" * 24})


def test_the_line_names_the_address_and_the_login_configured() -> None:
    assert console_line("127.0.0.1", 9464, WebConfig(admin_password_hash=HASH)) == (
        "Console: http://127.0.0.1:9464/ — log in with the admin password (web.admin_password_hash)"
    )
    assert console_line("127.0.0.1", 9464, WebConfig(api_keys=[KEY])) == (
        "Console: http://127.0.0.1:9464/ — log in with an API key (web.api_keys)"
    )
    both = console_line("10.0.0.5", 80, WebConfig(admin_password_hash=HASH, api_keys=[KEY]))
    assert both == ("Console: http://10.0.0.5:80/ — log in with the admin password (web.admin_password_hash) "
                    "or an API key (web.api_keys)")


def test_a_wildcard_listen_address_is_opened_on_loopback_and_no_login_says_how_to_set_one() -> None:
    assert console_line("0.0.0.0", 9464, WebConfig()) == (
        "Console: http://127.0.0.1:9464/ — no login is set up: put the hash `botgateway web hash-password` prints "
        "in BOTGATEWAY_ADMIN_PASSWORD_HASH (web.admin_password_hash)"
    )
    assert console_line("::1", 9464, WebConfig(api_keys=[KEY])).startswith("Console: http://[::1]:9464/ — ")


def run_config(tmp_path: Path, port: int, *, web_enabled: bool) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "llm: {provider: demo}\n"
        f"log: {{file: {tmp_path / 'bg.log'}}}\n"
        f"memory: {{sqlite_path: {tmp_path / 'bg.db'}}}\n"
        f"tools: {{inventory: {{path: {ROOT / 'tools' / 'sample_inventory.yaml'}}}}}\n"
        "adapters: {terminal: {enabled: true}}\n"
        f"http: {{enabled: true, host: 127.0.0.1, port: {port}}}\n"
        f"web: {{enabled: {str(web_enabled).lower()}, admin_password_hash: '{HASH}'}}\n"
    )
    return config


def test_run_in_a_terminal_says_in_one_line_where_the_console_is_and_how_to_log_in(tmp_path: Path) -> None:
    port = free_port()
    term = Pty([sys.executable, "-m", "botgateway.cli", "run", "-c", str(run_config(tmp_path, port, web_enabled=True))],
               cwd=tmp_path)
    try:
        banner = term.expect(r"you ›")
        lines = [line.strip() for line in banner.splitlines() if "Console:" in line]
        assert lines == [f"Console: http://127.0.0.1:{port}/ — log in with the admin password "
                         "(web.admin_password_hash)"]
        # It is true: the console's login page answers there.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=10) as page:
            assert page.status == 200
        term.send(b"\x04")
        assert _exit_code(term) == 0
    finally:
        term.close()


def test_without_the_console_the_chat_says_nothing_of_it(tmp_path: Path) -> None:
    port = free_port()
    term = Pty([sys.executable, "-m", "botgateway.cli", "run", "-c", str(run_config(tmp_path, port, web_enabled=False))],
               cwd=tmp_path)
    try:
        banner = term.expect(r"you ›")
        assert "/help for commands" in banner and "Console:" not in banner
        term.send(b"\x04")
        assert _exit_code(term) == 0
    finally:
        term.close()
