"""A client on a real loopback TCP socket: send raw bytes, read everything until the close.

Blocking sockets, because hypothesis calls each example synchronously while the servers run in
their own loop (:mod:`tests.fuzz.loop`). What the server does with a connection (answer, refuse,
close, reset) is the oracle's to judge, so nothing here raises for it: the bytes received and how
the connection ended are returned.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass


@dataclass
class Received:
    """What one connection got, and how it ended."""

    data: bytes
    #: "closed" (an orderly close), "reset" (the server dropped it with bytes unread), or
    #: "open" (still open when the time was up: a hung connection).
    ended: str
    seconds: float


def exchange(port: int, data: bytes, timeout: float = 5.0) -> Received:
    """Send ``data`` to ``127.0.0.1:port`` and read until the server closes (at most
    ``timeout`` seconds)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The server may refuse and close before reading it all: what it sent is judged.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        received = bytearray()
        ended = "open"
        while (left := timeout - (time.monotonic() - started)) > 0:
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                ended = "reset"
                break
            if not chunk:
                ended = "closed"
                break
            received += chunk
    return Received(bytes(received), ended, time.monotonic() - started)
