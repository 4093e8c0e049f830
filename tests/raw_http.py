"""HTTP and WebSocket by hand, for the tests that need what no client
library does: a TLS certificate of their own, a client that asks and leaves
at once, a socket that never reads, and a frame built byte by byte."""

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


def raw_socket_that_never_reads(port: int, cookie: str, path: str = "/ws/sessions/", tls=False):
    """A WebSocket opened by hand with a tiny receive buffer, which then reads
    nothing (``tls``: through TLS, certificate not checked)."""
    import base64
    import os
    import socket
    import ssl

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    scheme = "http"
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        sock = context.wrap_socket(sock, server_hostname="localhost")
        scheme = "https"
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {scheme}://127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"
        ).encode()
    )
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(1)
    assert reply.startswith(b"HTTP/1.1 101"), reply
    return sock


def client_frame(text: str) -> bytes:
    """One masked text frame, as a client must send it."""
    import os
    import struct

    payload = text.encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    if len(payload) < 126:
        head += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
    key = int.from_bytes((mask * (len(payload) // 4 + 1))[: len(payload)], "big")
    masked = (int.from_bytes(payload, "big") ^ key).to_bytes(len(payload), "big")
    return head + mask + masked
