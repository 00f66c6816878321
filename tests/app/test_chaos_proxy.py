"""The chaos run's S3 proxy keeps hold of every connection it still handles, and stops them
quietly. A handler waiting on an upstream that neither reads a request's body nor closes, after
its client hung up, used to be collected half-way: asyncio reported "Task was destroyed but it
is pending!" with a traceback (39 times in a 50-fault chaos run)."""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time

import pytest

from orderedstream.app.chaos.s3proxy import FaultyS3Proxy


class _DeafUpstream:
    """Answers each request at once, then neither reads the request's body nor closes the
    connection (a server that refused the request and lingers)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(4096)  # the request head only
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            self.held.append(conn)  # open, never read again

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_relayed_request_whose_body_the_upstream_never_reads_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    upstream = _DeafUpstream()
    proxy = FaultyS3Proxy(upstream.port).start()
    body = 64 << 20  # far more than the sockets' buffers: the proxy's upload cannot drain
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(3):
                client = socket.create_connection(("127.0.0.1", proxy.port))
                client.sendall(b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: "
                               + str(body).encode() + b"\r\n\r\n")
                client.settimeout(0.05)
                sent, answer = 0, b""
                while not answer.endswith(b"\r\n\r\n") and sent < body:
                    try:
                        sent += client.send(b"\0" * (1 << 16))
                    except (TimeoutError, BlockingIOError):
                        pass
                    try:
                        answer += client.recv(4096)
                    except (TimeoutError, BlockingIOError):
                        pass
                assert answer.startswith(b"HTTP/1.1 403"), answer
                client.close()  # the client hangs up, its upload unfinished
            gc.collect()
            time.sleep(0.2)
            assert proxy.open_handlers() == 3  # still waiting on the upstream, held
            proxy.stop()
            assert proxy.open_handlers() == 0
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == []
    finally:
        proxy.stop()
        upstream.close()
