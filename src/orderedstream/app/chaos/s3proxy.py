"""A fault-injecting HTTP proxy in front of an S3 endpoint (loopback only).

Every request gets its own upstream connection (the proxy forces ``Connection: close``), so a
fault decision is per request: answer 503 SlowDown or 500 InternalError without forwarding,
stall before forwarding, drop the connection before forwarding, or forward and then drop the
response (the request took effect but the client never hears so: the case that turns a
conditional create's retry into "already exists"). Rates can be changed while it runs.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from dataclasses import dataclass

from orderedstream.dev.services.process import free_port

_ERROR_BODY = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
               '<Message>injected by orderedstream chaos proxy</Message></Error>')


@dataclass
class FaultRates:
    """Probabilities per request (their sum must stay <= 1)."""

    slow_down: float = 0.0
    internal_error: float = 0.0
    stall: float = 0.0
    drop_request: float = 0.0
    drop_response: float = 0.0
    stall_seconds: float = 3.0


class FaultyS3Proxy:
    """``endpoint`` forwards to ``upstream_port`` on 127.0.0.1 with injected faults."""

    def __init__(self, upstream_port: int, seed: int = 1) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.rates = FaultRates()
        self.counts: Counter[str] = Counter()
        self.forced: list[str] = []  # faults for the next requests, in order, before the rates
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        # asyncio keeps only weak references to tasks, and a connection's protocol drops its
        # handler task once the client hangs up: a handler still closing its upstream would
        # be collected half-way ("Task was destroyed but it is pending!").
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        """The proxy's URL (``http://127.0.0.1:<port>``), to give clients as their S3
        endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultyS3Proxy:
        """Start serving on a thread of its own (a daemon thread with its event loop).

        Returns
        -------
        FaultyS3Proxy
            This proxy, serving.

        Raises
        ------
        RuntimeError
            The proxy was not listening within 10 seconds."""
        self._thread = threading.Thread(target=self._serve, name="s3-chaos-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("chaos proxy did not start")
        return self

    def stop(self) -> None:
        """Stop serving; connections still open are ended (a second call does nothing)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def open_handlers(self) -> int:
        """Connections the proxy is still handling."""
        return len(self._handlers)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        # Stopped: end the connections still open, quietly.
        pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
        for task in pending:
            task.cancel()
        self._server.close()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def force(self, *faults: str) -> None:
        """Inject exactly these faults into the next requests, in order, before the rates
        decide again.

        Parameters
        ----------
        *faults
            Fault names: "slow_down", "internal_error", "stall", "drop_request",
            "drop_response" or "pass" (forward untouched)."""
        self.forced.extend(faults)

    def _decide(self) -> str:
        if self.forced:
            return self.forced.pop(0)
        r, x = self.rates, self._rng.random()
        for name, p in (("slow_down", r.slow_down), ("internal_error", r.internal_error),
                        ("stall", r.stall), ("drop_request", r.drop_request),
                        ("drop_response", r.drop_response)):
            if x < p:
                return name
            x -= p
        return "pass"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            await self._exchange(reader, writer)
        except asyncio.CancelledError:  # the proxy stops: asyncio's streams would report a
            pass  # cancelled handler as an error ("Exception in callback ...")

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                        ) -> None:
        """One request: decide its fault, then answer, drop or forward it."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        lines = head.split(b"\r\n")
        headers = [h for h in lines[1:] if h and not h.lower().startswith(b"connection:")]
        length = 0
        chunked = False
        for h in headers:
            name, _, value = h.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
            if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        head = b"\r\n".join([lines[0], *headers, b"Connection: close", b"", b""])
        fault = self._decide()
        self.counts[fault] += 1
        if fault in ("slow_down", "internal_error"):
            code, status = (("SlowDown", b"503 Slow Down") if fault == "slow_down"
                            else ("InternalError", b"500 Internal Server Error"))
            body = _ERROR_BODY.format(code=code).encode()
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\n"
                         b"Content-Length: " + str(len(body)).encode() +
                         b"\r\nConnection: close\r\n\r\n" + body)
            await _close(writer)
            return
        if fault == "drop_request":
            await _close(writer)
            return
        if fault == "stall":
            await asyncio.sleep(self.rates.stall_seconds)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            await _close(writer)
            return
        up_writer.write(head)
        # Both directions stream: clients that send "Expect: 100-continue" wait for the
        # upstream's interim answer before they send the body.
        upload = asyncio.ensure_future(_pipe(reader, up_writer, None if chunked else length))
        try:
            await _relay_response(up_reader, writer, drop=fault == "drop_response")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            upload.cancel()
            await _close(up_writer)
            await _close(writer)


async def _relay_response(up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          drop: bool) -> None:
    """Copy the upstream's answer to the client; with ``drop``, pass only interim 100-continue
    answers and swallow the final one (the request took effect; the client never hears)."""
    if drop:
        while True:
            try:
                head = await up_reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            if head.startswith(b"HTTP/1.1 100"):
                writer.write(head)
                await writer.drain()
                continue
            await up_reader.read()  # let the upstream finish; the client gets nothing
            return
    while True:
        chunk = await up_reader.read(1 << 16)
        if not chunk:
            return
        writer.write(chunk)
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                limit: int | None) -> None:
    """Copy ``limit`` bytes (None: until EOF) from reader to writer."""
    remaining = limit
    while remaining is None or remaining > 0:
        size = 1 << 16 if remaining is None else min(remaining, 1 << 16)
        chunk = await reader.read(size)
        if not chunk:
            return
        writer.write(chunk)
        await writer.drain()
        if remaining is not None:
            remaining -= len(chunk)


_CLOSE_WAIT_S = 2.0
"""How long a connection's orderly close may wait before it is aborted."""


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s connection. Unsent data (an upload the upstream stopped reading,
    after the client hung up) would hold an orderly close forever: the connection is aborted
    instead, as it is when the close takes longer than :data:`_CLOSE_WAIT_S`."""
    transport = writer.transport
    try:
        if transport.get_write_buffer_size() > 0:
            transport.abort()
            return
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), _CLOSE_WAIT_S)
    except TimeoutError:
        transport.abort()
    except (ConnectionError, OSError):
        pass
