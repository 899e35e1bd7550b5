"""What the bridge's HTTP server writes to a client socket: one write per answer, not two.

uvicorn's httptools protocol writes a response's status line and headers when the app sends
``http.response.start`` and the body when it sends ``http.response.body``: two ``send`` calls and
two TCP segments for an answer the app produced in one go (the MCP fast path, the forwarding relay,
every small JSON answer). A client that waits for each answer before it sends the next request --
how a harness loop calls tools -- pays for the second segment on every call: another syscall here,
another wake-up and read there. ``HttpProtocol`` is uvicorn's protocol with its transport wrapped
in ``CoalescingTransport``, which holds what is written during one turn of the event loop and
writes it once: as soon as the response is complete (uvicorn's ``on_response_complete``, in the
same step of the app's task, so the answer does not wait for another turn of the loop), else at
the end of that turn. Nothing is held longer: a streamed body whose chunks come in separate turns
still goes out chunk by chunk, and closing flushes first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport whose writes within one event-loop turn leave as one ``write``; everything else
    is the wrapped transport's."""

    __slots__ = ("_loop", "_pending", "_timer", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._timer: asyncio.Handle | None = None  # the end-of-turn flush, while something is held

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._timer = self._loop.call_soon(self._flush_turn)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held now (the response is complete: nothing else joins it this turn)."""
        if self._timer is not None:
            self._timer.cancel()
        self._flush_turn()

    def _flush_turn(self) -> None:
        self._timer = None
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:  # get_extra_info, is_closing, pause_reading, ...
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a ``CoalescingTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.wire = CoalescingTransport(transport, self.loop)
        super().connection_made(self.wire)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        self.wire.flush()  # the answer is whole: out now, not a loop turn later
        super().on_response_complete()
