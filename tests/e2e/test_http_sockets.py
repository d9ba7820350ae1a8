"""The embedded server's listening socket gives accepted connections TCP_NODELAY.

asyncio sets ``TCP_NODELAY`` on a transport only when its socket's protocol is ``IPPROTO_TCP``;
a socket made with protocol 0 (the default) did not get it, and every response on a kept-alive
connection after the first then waited for the client's delayed ACK (about 40 ms).
"""

from __future__ import annotations

import asyncio
import socket

from controlplane.runtime.httpserver import bind


def test_bound_socket_names_tcp() -> None:
    for host in ("127.0.0.1", "::1"):
        try:
            sock = bind(host, 0)
        except OSError:  # no IPv6 on this machine
            continue
        with sock:
            assert sock.proto == socket.IPPROTO_TCP


def test_accepted_connections_have_nodelay() -> None:
    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        sock = bind("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Protocol, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(main()) != 0
