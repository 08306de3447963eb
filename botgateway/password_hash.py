"""Password hashes for the web console's admin login: ``scrypt$<salt>$<hash>``, both in hex.

The config keeps only the hash (``web.admin_password_hash``), made by
``botgateway web hash-password``. scrypt (from :mod:`hashlib`, no extra
dependency) is memory-hard, so a leaked config is slow to brute-force; its cost
is fixed here (n=2**14, r=8, p=1: about 16 MiB and a few tens of milliseconds a
try), and written into no hash, so one format string names the whole scheme.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["SCHEME", "hash_password", "is_password_hash", "verify_password"]

SCHEME = "scrypt"
"""The first field of every hash."""

_N, _R, _P = 1 << 14, 8, 1
_SALT_BYTES = 16
_HASH_BYTES = 32


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=_HASH_BYTES,
                          maxmem=64 * 1024 * 1024)


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """The hash of ``password`` to put in the config: ``scrypt$<32 hex salt>$<64 hex hash>`` (a new salt each time)."""
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    return f"{SCHEME}${salt.hex()}${_scrypt(password, salt).hex()}"


def _parts(stored: str) -> tuple[bytes, bytes] | None:
    fields = stored.strip().split("$")
    if len(fields) != 3 or fields[0] != SCHEME:
        return None
    try:
        salt, digest = bytes.fromhex(fields[1]), bytes.fromhex(fields[2])
    except ValueError:
        return None
    if len(salt) < 8 or len(digest) != _HASH_BYTES:
        return None
    return salt, digest


def is_password_hash(text: str) -> bool:
    """Whether ``text`` is a hash this module made (the config checks it, so a pasted password is refused)."""
    return _parts(text) is not None


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (compared in constant time); False for a malformed ``stored``."""
    parts = _parts(stored)
    if parts is None:
        return False
    salt, digest = parts
    return hmac.compare_digest(_scrypt(password, salt), digest)
