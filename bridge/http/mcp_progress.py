"""Progress on a long ``tools/call``: MCP's own way to keep a client waiting while the upstream works.

A ``tools/call`` whose ``params._meta.progressToken`` is a string or an integer, from a client whose
Accept allows ``text/event-stream`` (the SDK's rule: ``text/event-stream``, ``text/*`` or ``*/*``),
is answered by ``answer_with_progress`` around whatever answers it otherwise -- the fast path, the
SDK, or the relay to the replica that owns the session. The answer is held for one
``progress_interval_s``:

- ready within it (most calls), it goes out exactly as it came: the same status, headers and bytes
  as without a progress token (the SDK's own 2026-07-28 transport defers its SSE commit the same way);
- not ready, the response is committed as ``text/event-stream`` and carries a
  ``notifications/progress`` for the token at once and then every ``progress_interval_s`` (``progress``:
  the seconds since the call began, increasing; no ``total``; ``message`` "upstream tool running,
  35 s"), then the answer's JSON-RPC message -- its bytes as the JSON answer would carry them -- as
  the last event, and the stream ends. An answer that is itself a stream (the owner replica streamed
  to the relay) gives its last JSON-RPC response; the owner's progress events are superseded by
  this replica's.

A client that goes away (``http.disconnect``) stops the stream, and the answering task is
cancelled: the upstream call itself runs in a task of its own (``Bridge.call_tool``), finishes, and
is logged in its session, as with any client that disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.types import Message, Receive, Send

from bridge import exactjson
from bridge.http.responses import jsonrpc_error

log = logging.getLogger("gym_mcp_bridge.mcp")

ProgressToken = str | int
Answerer = Callable[[Receive, Send], Awaitable[None]]  # answers the request on (receive, send)

MARK = b"progressToken"  # absent from a body: no progress asked, nothing parsed
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]
_SSE_TYPES = frozenset({"text/event-stream", "text/*", "*/*"})


def requested(headers: list[tuple[bytes, bytes]], body: bytes) -> ProgressToken | None:
    """The progress token of a single ``tools/call`` request whose client accepts an SSE answer, else
    None (no token, another method, a batch, a notification, an unparsable body, no SSE in Accept)."""
    accept = b",".join(value for key, value in headers if key == b"accept").decode("latin-1")
    if not any(kind.split(";", 1)[0].strip().lower() in _SSE_TYPES for kind in accept.split(",")):
        return None
    try:
        message = exactjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(message) is not dict or message.get("method") != "tools/call" or "id" not in message:
        return None
    params = message.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    token = meta.get("progressToken") if type(meta) is dict else None
    return token if type(token) is str or type(token) is int else None


def notification(token: ProgressToken, progress: float, message: str) -> bytes:
    params = {"progressToken": token, "progress": progress, "message": message}
    return event(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}))


def event(data: bytes) -> bytes:
    """One SSE ``message`` event (the framing the MCP SDK's transports write)."""
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"


class _Held:
    """The answer as the answerer sends it: held until it is whole."""

    def __init__(self) -> None:
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.whole = asyncio.Event()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.whole.set()

    async def replay(self, send: Send) -> None:
        assert self.start is not None
        await send(self.start)
        await send({"type": "http.response.body", "body": b"".join(self.chunks), "more_body": False})

    def last_message(self, request_id: Any) -> bytes:
        """The answer's JSON-RPC message: the body of a JSON answer; the last response event of a
        stream; a JSON-RPC error naming the status when there is neither."""
        body = b"".join(self.chunks)
        headers = dict(self.start.get("headers", [])) if self.start is not None else {}
        if headers.get(b"content-type", b"").startswith(b"text/event-stream"):
            for data in reversed(_event_data(body)):
                with contextlib.suppress(orjson.JSONDecodeError):
                    message = orjson.loads(data)
                    if isinstance(message, dict) and ("result" in message or "error" in message):
                        return data
        else:
            with contextlib.suppress(orjson.JSONDecodeError):
                orjson.loads(body)
                return body.replace(b"\r", b"").replace(b"\n", b"")  # JSON encoders write none; be sure
        status = self.start["status"] if self.start is not None else 500
        reason = f"the answer (HTTP {status}) carried no JSON-RPC message"
        return jsonrpc_error(502, reason, request_id, kind="internal")


def _event_data(stream: bytes) -> list[bytes]:
    """The ``data`` of each event of an SSE body (multi-line data joined by LF, as the spec says)."""
    found = []
    for block in stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n"):
        lines = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if lines:
            found.append(b"\n".join(lines))
    return found


async def answer_with_progress(
    answer: Answerer,
    body: bytes,
    token: ProgressToken,
    interval: float,
    receive: Receive,
    send: Send,
) -> None:
    """Answer the request with ``answer`` (see the module docstring): as it comes when it is whole
    within ``interval`` seconds, else as an SSE stream of progress for ``token`` and then the answer."""
    held = _Held()
    gone = asyncio.Event()
    given = False

    async def inner_receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    began = time.monotonic()
    task = asyncio.ensure_future(answer(inner_receive, held.send))
    watcher = asyncio.ensure_future(watch())
    try:
        if await _settled(held, task, gone, interval) and not gone.is_set():
            if held.whole.is_set():
                await held.replay(send)
                return
            task.result()  # the answerer ended without a whole answer: its error, as without progress
            return
        if gone.is_set():
            return
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        while True:
            elapsed = time.monotonic() - began
            text = f"upstream tool running, {elapsed:.0f} s"
            chunk = notification(token, round(elapsed, 3), text)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if await _settled(held, task, gone, interval):
                break
        if gone.is_set():
            return
        if held.whole.is_set():
            last = held.last_message(_request_id(body))
        else:
            exc = task.exception() if not task.cancelled() else None
            log.error("tools/call answer failed after the progress stream began: %r", exc)
            reason = f"internal error ({type(exc).__name__}); see the bridge log"
            last = jsonrpc_error(500, reason, _request_id(body))
        await send({"type": "http.response.body", "body": event(last), "more_body": False})
    finally:
        watcher.cancel()
        if not task.done():
            if gone.is_set():
                task.cancel()  # the client went away: the upstream call goes on in its own task
                task.add_done_callback(_quiet)
            else:
                await task  # its answer is out; what it does after (the SDK's own cleanup) ends here


async def _settled(held: _Held, task: asyncio.Future[None], gone: asyncio.Event, wait: float) -> bool:
    """Wait up to ``wait`` seconds for the answer to be whole, the answerer to end or the client to
    go; True when one of them happened."""
    if held.whole.is_set() or task.done() or gone.is_set():
        return True
    whole = asyncio.ensure_future(held.whole.wait())
    left = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait((whole, left, task), timeout=wait, return_when=asyncio.FIRST_COMPLETED)
    finally:
        whole.cancel()
        left.cancel()
    return held.whole.is_set() or task.done() or gone.is_set()


def _quiet(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("tools/call answer for a client that went away: %r", task.exception())


def _request_id(body: bytes) -> int | str | None:
    with contextlib.suppress(orjson.JSONDecodeError):
        message = orjson.loads(body)
        request_id = message.get("id") if isinstance(message, dict) else None
        return request_id if isinstance(request_id, int | str) else None
    return None
