"""The admin password's hash: the format the config keeps, and ``botgateway web hash-password`` run as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from botgateway.password_hash import hash_password, is_password_hash, verify_password
from tests.paths import REPO


def test_a_hash_verifies_its_password_only() -> None:
    stored = hash_password("correct horse battery staple")
    scheme, salt, digest = stored.split("$")
    assert scheme == "scrypt" and len(salt) == 32 and len(digest) == 64
    assert is_password_hash(stored)
    assert verify_password("correct horse battery staple", stored)
    assert not verify_password("correct horse battery stapler", stored)
    assert hash_password("correct horse battery staple") != stored  # a new salt each time


def test_a_pasted_password_or_a_damaged_hash_is_no_hash_and_verifies_nothing() -> None:
    for text in ("correct horse battery staple", "", "scrypt$zz$00", "bcrypt$" + "0" * 32 + "$" + "0" * 64,
                 hash_password("x")[:-2]):
        assert not is_password_hash(text), text
        assert not verify_password("x", text)


def hash_command(stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOTGATEWAY_", "LLM_"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "botgateway.cli", "web", "hash-password"], input=stdin, cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_hash_password_prints_only_the_hash_of_the_password_read_from_stdin(tmp_path: Path) -> None:
    done = hash_command("an admin password of some length\n", tmp_path)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip()
    assert verify_password("an admin password of some length", printed)
    assert "an admin password" not in done.stdout + done.stderr


def test_hash_password_refuses_a_short_password(tmp_path: Path) -> None:
    done = hash_command("short\n", tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert "at least 12 characters" in done.stderr


def test_the_config_takes_a_hash_and_refuses_a_pasted_password_without_repeating_it() -> None:
    from botgateway.config import ConfigError, parse_config

    stored = hash_password("correct horse battery staple")
    assert parse_config({"web": {"admin_password_hash": stored}}).web.admin_password_hash == stored
    try:
        parse_config({"web": {"admin_password_hash": "correct horse battery staple"}})
    except ConfigError as exc:
        text = "\n".join(exc.problems)
    else:
        raise AssertionError("a password in place of its hash was accepted")
    assert "web.admin_password_hash" in text and "botgateway web hash-password" in text
    assert "correct horse" not in text
