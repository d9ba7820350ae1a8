"""The harness's free ports come from below the ephemeral range, where no outgoing connection's
local port lands (controlplane/envtest/ports.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from controlplane.envtest.ports import PORT_FLOOR, ephemeral_floor, free_port


def range_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


def test_ports_come_from_below_the_ephemeral_range_and_are_free(tmp_path: Path) -> None:
    ranges = range_file(tmp_path, "32768\t60999\n")
    ports = {free_port(range_file=ranges) for _ in range(50)}
    assert all(PORT_FLOOR <= port < 32768 for port in ports), sorted(ports)
    assert len(ports) > 1, "random picks, so parallel workers rarely pick the same port"
    port = ports.pop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free when handed out


def test_a_taken_port_is_never_handed_out(tmp_path: Path) -> None:
    ranges = range_file(tmp_path, f"{PORT_FLOOR + 1000} 60999")
    held: dict[int, socket.socket] = {}
    try:  # every candidate below the range taken: each answer is a free port elsewhere
        for port in range(PORT_FLOOR, PORT_FLOOR + 1000):
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken already by something else on this machine
                sock.close()
                continue
            held[port] = sock
        chosen = {free_port(range_file=ranges) for _ in range(20)}
    finally:
        for sock in held.values():
            sock.close()
    assert not chosen & set(held), "a port something was bound to was handed out"
    assert all(port >= PORT_FLOOR + 1000 for port in chosen), "the fallback is the kernel's"


def test_without_the_range_the_kernel_chooses(tmp_path: Path) -> None:
    assert ephemeral_floor(tmp_path / "missing") is None
    assert ephemeral_floor(range_file(tmp_path, "garbage")) is None
    port = free_port(range_file=tmp_path / "missing")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_too_little_room_below_the_range_leaves_the_choice_to_the_kernel(tmp_path: Path) -> None:
    ranges = range_file(tmp_path, f"{PORT_FLOOR + 10} 60999")
    assert all(free_port(range_file=ranges) >= PORT_FLOOR + 10 for _ in range(20))
