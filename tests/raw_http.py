"""HTTP by hand, for the tests that need what no client library does: a TLS
certificate of their own, and a client that asks and leaves at once."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A key and a certificate for localhost, made with openssl for one test."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return key, cert


def ask_and_leave(port: int, path: str, cookie: str) -> None:
    """A GET of ``path`` whose client leaves as soon as it asked."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n".encode())
