"""uvicorn around the application, with a drain on SIGTERM: ``/ready`` turns false and new
requests get 503, the requests in flight finish, then the server stops (within ``grace``
seconds in all) and the process exits 0, as a rolling update or a scale-down expects."""

from __future__ import annotations

import contextlib
import sys
import resource
import signal
import time

import uvicorn

from tfspec.serve.app import create_app
from tfspec.serve.connections import protocol
from tfspec.serve.errors import ApiError
from tfspec.serve.service import ServeConfig, Service


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, service: Service, grace: float, announce=None):
        super().__init__(config)
        self.service, self.grace, self.deadline, self.announce = service, grace, None, announce

    async def startup(self, sockets=None) -> None:
        """uvicorn's, then ``announce(port)`` with the port bound (``--port 0``: the one the kernel picked)."""
        await super().startup(sockets)
        if self.announce is not None and self.servers:
            self.announce(self.servers[0].sockets[0].getsockname()[1])

    def handle_exit(self, sig, frame) -> None:
        if sig != signal.SIGTERM or self.deadline is not None:
            return super().handle_exit(sig, frame)  # SIGINT (twice: at once), or SIGTERM again
        self.service.draining, self.deadline = True, time.monotonic() + self.grace

    async def on_tick(self, counter: int) -> bool:
        if self.deadline is not None and not self.should_exit:
            # in flight done, or most of the grace spent: what is left answers 503 (not a cancelled
            # task's 500) within uvicorn's own shutdown, which gets the rest of the grace
            if time.monotonic() > self.deadline - self.grace / 4:
                self.service.stopped.set()
            self.should_exit = self.service.inflight == 0 or self.service.stopped.is_set()
        return await super().on_tick(counter)


DEFAULT_CONNECTIONS = 1000
"""``--max-connections``' default where the process may open that many files and more."""
OTHER_FILES = 64
"""Files the process keeps open besides its connections (the model, its threads, logs)."""


def connection_limit(config: ServeConfig) -> int:
    """Connections served at once: ``config.max_connections``, by default 1000 or what the
    open-file limit leaves (each connection is a file; the model and its threads take some):
    past the limit, accepting would fail with EMFILE, which uvicorn only logs. The soft limit
    is raised first, as far as the hard one allows (a soft 1024 is common)."""
    files = _more_files((config.max_connections or DEFAULT_CONNECTIONS) + OTHER_FILES)
    if config.max_connections is not None:
        return config.max_connections
    if files == resource.RLIM_INFINITY:
        return DEFAULT_CONNECTIONS
    return max(min(DEFAULT_CONNECTIONS, files - OTHER_FILES), 1)


def _more_files(wanted: int) -> int:
    """The soft open-file limit, raised to ``wanted`` where it is lower and the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return soft


BUSY = ApiError(503, "the server holds as many connections as --max-connections allows; retry",
                headers={"Retry-After": "1", "Connection": "close"}).response()
"""The answer to a request on a connection over ``--max-connections`` (an ASGI app), like every
other refusal: JSON in OpenAI's shape and Retry-After, which uvicorn's own (plain text) lacks."""


def _answer_busy_as_tfspec(http: type) -> bool:
    """uvicorn's HTTP protocols answer over their connection limit with the ``service_unavailable``
    of their module, looked up at each refusal (uvicorn 0.30 to 0.54): point the module of the
    protocol this server runs (``http``: ``connections.protocol``, over uvicorn's choice of
    httptools or h11) at ``BUSY``. Whether that took effect is checked, not assumed: where a
    uvicorn release answers otherwise, its own plain-text 503 stays, and the server says so."""
    base = next(c for c in http.__mro__ if c.__module__.startswith("uvicorn.protocols.http."))
    module = sys.modules[base.__module__]
    if hasattr(module, "service_unavailable"):
        module.service_unavailable = BUSY
    if getattr(module, "service_unavailable", None) is BUSY:
        return True
    print(f"warning: uvicorn {uvicorn.__version__}'s {base.__name__} has no service_unavailable to replace: over "
          "--max-connections it answers its own plain-text 503", file=sys.stderr)
    return False


def build(config: ServeConfig, grace: float, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "warning", announce=None) -> _Server:
    """The server over ``config`` with its model loaded. uvicorn picks httptools and uvloop
    (the ``serve`` extra) over h11 and asyncio: they took a third off the event loop's time
    per request under load (BENCHMARKS.md)."""
    service = Service(config)
    app = create_app(config, service)
    limit = connection_limit(config)
    http = protocol(config.header_timeout, limit)
    _answer_busy_as_tfspec(http)
    # uvicorn refuses a request once the open connections (this one counted) reach its limit,
    # which idle ones never fill: a newcomer closes the one idle the longest (``connections``)
    return _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                  timeout_graceful_shutdown=max(grace / 4, 0.5), lifespan="on",
                                  http=http, limit_concurrency=limit + 1),
                   service, grace, announce)
