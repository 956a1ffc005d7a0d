"""Connections, the server's scarce resource: the listening socket bound before anything else,
a deadline on each request's headers, and idle connections given up when a new one needs a slot.

uvicorn closes a connection left idle after an answer (``timeout_keep_alive``), but never one
that sends nothing at all, nor one that sends its headers a byte at a time (each byte restarts
that timer): 1,005 idle sockets held ``--max-connections`` full and ``/health`` answered 503 to
everyone. Here a connection with no request in progress, from its opening or its last answer,
has ``header_timeout`` seconds to send its next request's headers, whatever it sends meanwhile
(nginx's ``client_header_timeout``); later it is closed. And a connection opened over the limit
closes the one idle the longest (nginx's reusable connections, ``ngx_drain_connections``), so
idle and trickling sockets never keep a client out. A request's body has its own deadline
(``ServeConfig.body_timeout``, ``Service.body``)."""

from __future__ import annotations

import socket
import time

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from tfspec.errors import TfspecError


def bind(host: str, port: int, shared: bool = False) -> socket.socket:
    """A socket bound to ``host``:``port`` (not listening yet), or one ``TfspecError`` naming them
    (a port in use, a host that does not resolve), before the model loads: uvicorn binding it
    would log its own ``ERROR:`` line and exit 1. ``shared``: other ``SO_REUSEPORT`` sockets of
    this user may bind the port too (``workers``)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind)
    except OSError as e:
        raise TfspecError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise TfspecError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def protocol(header_timeout: float, limit: int) -> type:
    """uvicorn's HTTP protocol (httptools where installed, else h11) with the header deadline
    and, past ``limit`` open connections, the eviction of the one idle the longest."""

    class Deadlined(AutoHTTPProtocol):
        deadline = None
        idle_since = 0.0

        @property
        def idle(self) -> bool:
            """No request in progress: none yet, or the last one answered."""
            return self.cycle is None or self.cycle.response_complete

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._wait_for_headers()
            _evict(self.connections, limit, self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._wait_for_headers()

        def connection_lost(self, exc) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            super().connection_lost(exc)

        def _wait_for_headers(self) -> None:
            """Idle from now: closed in ``header_timeout`` seconds unless a request is in progress then."""
            self.idle_since = time.monotonic()
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.loop.call_later(header_timeout, self._expire)

        def _expire(self) -> None:
            if self.idle:  # a request in progress re-arms the deadline once answered
                self.transport.close()

    return Deadlined


def _evict(connections: set, limit: int, newcomer) -> None:
    """Over ``limit`` open connections: close the one idle the longest, ``newcomer`` aside. It
    leaves ``connections`` at once, so that the newcomer's request is not refused for it."""
    if len(connections) <= limit:
        return
    idle = [c for c in connections if c is not newcomer and c.idle and not c.transport.is_closing()]
    if idle:
        oldest = min(idle, key=lambda c: c.idle_since)
        oldest.transport.close()
        connections.discard(oldest)
