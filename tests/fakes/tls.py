"""A throwaway certificate authority and a server certificate for 127.0.0.1, made with the ``openssl`` command.

For servers a test starts with TLS (a redis-server, a Redis Sentinel): clients
trust the CA file, and the certificate names ``IP:127.0.0.1`` so hostname
checks pass.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsFiles", "make_tls_files"]


@dataclass(frozen=True)
class TlsFiles:
    """The files a TLS server and its clients need."""

    ca: Path
    """The CA certificate clients trust."""
    cert: Path
    """The server's certificate (for 127.0.0.1), signed by the CA."""
    key: Path
    """The server's private key."""


def make_tls_files(folder: Path) -> TlsFiles:
    """Write a CA and a certificate for 127.0.0.1 into ``folder`` (valid for a day)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed (Debian: apt-get install openssl)")
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(ca=folder / "ca.crt", cert=folder / "server.crt", key=folder / "server.key")
    ca_key, request, extensions = folder / "ca.key", folder / "server.csr", folder / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for command in (
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", files.ca, "-days", "1",
         "-subj", "/CN=botgateway test CA"],
        [openssl, "req", *ec, "-keyout", files.key, "-out", request, "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", request, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", files.cert, "-days", "1", "-extfile", extensions],
    ):
        subprocess.run([str(part) for part in command], check=True, capture_output=True)
    return files
