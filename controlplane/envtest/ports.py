"""Free loopback ports for the processes the harness starts, chosen where nothing else takes them.

A port is chosen here and bound later by another process, so something may take it in between.
The kernel's own choice (binding port 0) comes from the ephemeral range, the same range every
outgoing connection's local port comes from: a test that opens thousands of connections (the
slow-client flood, a held-request storm) took an operator's chosen probe port in CI, and the
operator exited with "Address already in use". So ports come from below that range, where no
outgoing connection lands, picked at random (parallel workers rarely pick the same one) and
checked free by binding. Where the range cannot be read or leaves too little room, the kernel
chooses, as before.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

#: The lowest port handed out: above the well-known and registered ports services use by
#: default on a development machine (8080, 9090, 10250, ...).
PORT_FLOOR: Final = 20000
#: Where Linux says which local ports outgoing connections use.
EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Fewer candidate ports than this below the ephemeral range and the kernel chooses instead.
MIN_CANDIDATES: Final = 1000
#: Random candidates tried before falling back to the kernel's choice.
ATTEMPTS: Final = 64


def ephemeral_floor(range_file: Path = EPHEMERAL_RANGE_FILE) -> int | None:
    """The lowest port the kernel gives outgoing connections, or ``None`` where unknown."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host: str = "127.0.0.1", *, range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A port on ``host`` that was free a moment ago and that no outgoing connection will take."""
    ceiling = ephemeral_floor(range_file)
    if ceiling is not None and ceiling - PORT_FLOOR >= MIN_CANDIDATES:
        for port in random.sample(range(PORT_FLOOR, ceiling), ATTEMPTS):
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
