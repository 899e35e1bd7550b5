"""``bridge.http.wire``: what the bridge writes to a client socket, one write per answer.

The end-to-end behaviour (every answer of every route, byte for byte) is what the rest of the suite
checks through real bridges, which serve with ``HttpProtocol``. Here: that an answer really leaves
in one ``send`` -- counted on a real socket pair with a real uvicorn protocol serving a real ASGI
app, before the app's task yields to the loop -- and the transport's rules (writes of one loop turn
joined, nothing held past the turn, a complete response or a close flushes at once).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from bridge.http.wire import CoalescingTransport, HttpProtocol

pytestmark = pytest.mark.anyio


class Recording:
    """The transport under the wrapper: records each write (a stand-in: the count is the point)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


async def test_writes_of_one_turn_leave_as_one_and_nothing_is_held_past_it() -> None:
    under = Recording()
    wire = CoalescingTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    wire.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    wire.write(b"{}")
    assert under.writes == [], "held until the end of the turn"
    await asyncio.sleep(0)
    assert under.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    wire.write(b"chunk 1")
    await asyncio.sleep(0)
    wire.write(b"chunk 2")
    await asyncio.sleep(0)
    assert under.writes[1:] == [b"chunk 1", b"chunk 2"], "a later turn's write is not delayed further"
    assert wire.get_extra_info("peername") == ("127.0.0.1", 1)


async def test_flush_writes_what_is_held_at_once_and_the_turn_end_adds_nothing() -> None:
    under = Recording()
    wire = CoalescingTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    wire.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    wire.write(b"{}")
    wire.flush()
    assert under.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"], "out at once"
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(under.writes) == 1, "the end-of-turn flush was cancelled: nothing twice, nothing empty"
    wire.flush()
    assert len(under.writes) == 1


async def test_close_flushes_first_and_nothing_is_written_after_it() -> None:
    under = Recording()
    wire = CoalescingTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    wire.write(b"last answer")
    wire.close()
    assert under.writes == [b"last answer"] and under.closed
    wire.write(b"too late")
    await asyncio.sleep(0)
    assert under.writes == [b"last answer"]


async def test_a_response_leaves_in_one_send_through_the_uvicorn_protocol() -> None:
    """A real socket pair, uvicorn's protocol as the bridge serves it and a real ASGI app that sends
    the start and the body as two messages: the socket's transport is written once (the plain
    httptools protocol writes twice), and already when the app's last ``send`` returns -- the answer
    does not wait for another turn of the event loop."""
    written_when_sent: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})
        written_when_sent.append(len(writes))  # no await since the send: same step of the task

    config = Config(app, http=HttpProtocol, log_level="warning")
    config.load()
    loop = asyncio.get_running_loop()
    server_sock, client_sock = socket.socketpair()
    protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    socket_transport, _ = await loop.connect_accepted_socket(lambda: protocol, server_sock)
    writes: list[bytes] = []
    real_write = socket_transport.write

    def counted(data: bytes) -> None:
        writes.append(bytes(data))
        real_write(data)

    socket_transport.write = counted  # type: ignore[method-assign,assignment]
    client_sock.setblocking(False)
    await loop.sock_sendall(client_sock, b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
    for _ in range(200):
        await asyncio.sleep(0.01)
        if writes:
            break
    await asyncio.sleep(0.05)
    assert len(writes) == 1, writes
    assert written_when_sent == [1], "written in the same step of the app's task"
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\nhello")
    assert client_sock.recv(65536) == writes[0]
    client_sock.close()
    socket_transport.close()
