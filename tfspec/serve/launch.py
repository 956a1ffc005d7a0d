"""``serve``: one server process, or ``workers`` processes sharing the port (``workers``)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

from tfspec.serve.config import Listening, ServeConfig
from tfspec.serve.connections import bind
from tfspec.serve.server import build
from tfspec.serve.workers import supervise, unguarded


def serve(config: ServeConfig, listening: Listening = Listening(), log_level: str = "warning",
          guard: Callable = unguarded, announce: Callable[[int], None] | None = None) -> int:
    """Serve until SIGTERM has drained (exit status 0), in this process or in
    ``listening.workers`` processes sharing the port, each with ``config.threads`` threads
    (default: its share of the cores). ``guard(fn, *args)`` is each worker process's exception
    boundary (the CLI's, which turns input errors into ``error:`` lines): a module-level
    function, sent to each process. ``announce(port)`` is told the port once bound (port 0: the
    one the kernel picked)."""
    host, port, grace, workers = listening.host, listening.port, listening.grace, listening.workers
    if workers == 1:
        sock = bind(host, port)  # a port in use or a host unknown: one error line, before the model loads
        build(config, grace, host, port, log_level, announce).run(sockets=[sock])
        return 0
    threads = config.threads or max(1, (os.cpu_count() or 1) // workers)
    return supervise(replace(config, threads=threads), host, port, grace, workers, log_level, guard, announce)
