"""``botgateway web hash-password``: the hash to put under ``web.admin_password_hash`` for the console's admin login.

The password is read from the terminal without echo (twice, so a typo is not
locked in), or as one line of standard input when that is not a terminal
(``printf '%s' "$PASS" | botgateway web hash-password``). Only the hash is
printed; the password never reaches a log or the shell's history.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any, TextIO

from botgateway.password_hash import hash_password

__all__ = ["MIN_PASSWORD_CHARS", "add_web_parser", "hash_password_command"]

MIN_PASSWORD_CHARS = 12
"""Shortest admin password accepted: the console may face a network, and scrypt only slows guessing down."""


def add_web_parser(sub: Any) -> None:
    """Register ``web`` and its actions on the sub-command parsers ``sub``."""
    web = sub.add_parser("web", help="the web console: make the admin password's hash")
    web_sub = web.add_subparsers(dest="web_command", metavar="ACTION")
    web_sub.required = True
    web_sub.add_parser(
        "hash-password",
        help="read a password (no echo) and print the hash for web.admin_password_hash",
        description="Read the console's admin password from the terminal without echo (or one line of stdin) "
                    "and print its scrypt hash, to put under web.admin_password_hash in config.yaml.",
    )


def _read_password(stdin: TextIO, err: TextIO) -> str | None:
    if stdin.isatty():
        first = getpass.getpass("Admin password: ", stream=err)
        second = getpass.getpass("Again: ", stream=err)
        if first != second:
            print("The two passwords differ; nothing was hashed. Run it again.", file=err)
            return None
        return first
    return stdin.readline().rstrip("\r\n")


def hash_password_command(args: argparse.Namespace, *, stdin: TextIO | None = None, out: TextIO | None = None,
                          err: TextIO | None = None) -> int:
    """Run ``web hash-password``: print the hash of the password read; the exit code (1 when it was refused)."""
    del args  # no options yet
    stdin, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    try:
        password = _read_password(stdin, err)
    except (EOFError, KeyboardInterrupt):
        print("\nNo password read; nothing was hashed.", file=err)
        return 1
    if password is None:
        return 1
    if len(password) < MIN_PASSWORD_CHARS:
        print(f"The password is too short: use at least {MIN_PASSWORD_CHARS} characters.", file=err)
        return 1
    print(hash_password(password), file=out)
    return 0
