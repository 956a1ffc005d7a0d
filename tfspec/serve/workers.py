"""``tfspec serve --workers N``: N server processes on one port, each listening on its own
``SO_REUSEPORT`` socket (Linux), so that the kernel spreads new connections evenly over them by
their addresses, as NGINX's ``reuseport`` and Envoy do. One listening socket shared by all
processes (uvicorn's and gunicorn's workers) was tried first: the kernel wakes the process that
waited last, and as the event loops here are idle while a thread decodes, one worker took every
connection. Each process loads its own model and runs its own queue and batcher, so they share
nothing but the port: a process's ``/ready`` and ``/metrics`` are its own. This is the
one-machine form of vLLM's data parallelism (one engine per device); on CPU each worker gets its
share of the cores.

The supervisor (this process) starts the workers one after another, each once the previous one
has loaded (a bad export stops at the first, with one ``error:`` line, and peak memory holds one
model loading at a time), restarts one that dies while serving, and passes SIGTERM and SIGINT on:
each worker drains as a single server does, and the supervisor exits 0 when all have.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import wait

from tfspec.serve.connections import bind
from tfspec.serve.server import build

LOAD_SECONDS = 600
"""How long a worker may take to load its model before the supervisor gives up on it."""


def supervise(config, host: str, port: int, grace: float, workers: int, log_level: str, guard,
              announce=None) -> int:
    """Serve with ``workers`` processes until SIGTERM or SIGINT; the exit status of the whole:
    0 after a clean drain, a worker's own status if one could not start. ``guard(fn, *args)``
    runs each worker, ``announce(port)`` is told the port once bound (``launch.serve``)."""
    held = bind(host, port, shared=True)  # bound, never listening: keeps the port (0: picks one) between restarts
    address = (host, held.getsockname()[1])
    if announce is not None:
        announce(address[1])
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this one's threads
    stopping: list[int] = []
    running: list = []

    def forward(sig, frame):
        stopping.append(sig)
        for process in running:
            if process.is_alive():
                os.kill(process.pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for _ in range(workers):
        process, status = _start(context, config, address, grace, log_level, stopping, guard)
        if process is None:
            return _stop(running, grace, stopping, forward) or status
        running.append(process)
    print(f"tfspec serve: {workers} workers listening on port {address[1]} "
          f"(pids {', '.join(str(p.pid) for p in running)})", file=sys.stderr)
    while not stopping:
        wait([p.sentinel for p in running], timeout=0.5)
        for i, process in enumerate(running):
            if not process.is_alive() and not stopping:
                print(f"tfspec serve: worker {process.pid} exited ({process.exitcode}); starting another",
                      file=sys.stderr)
                replacement, status = _start(context, config, address, grace, log_level, stopping, guard)
                if replacement is None:  # could not load, or a signal came while it loaded
                    del running[i]  # the dead one's status is not the drain's
                    return _stop(running, grace, stopping, forward) or status
                running[i] = replacement
    return _join(running, grace)


def _start(context, config, address: tuple, grace: float, log_level: str, stopping: list, guard):
    """(a worker that has loaded its model, 0), or (None, the status to exit with) if it could
    not (it printed its ``error:`` line) or a signal came first (0)."""
    loaded = context.Event()
    process = context.Process(target=_worker, args=(guard, config, address, grace, log_level, loaded), daemon=False)
    process.start()
    deadline = time.monotonic() + LOAD_SECONDS
    while not loaded.wait(0.1):
        late = time.monotonic() > deadline
        if stopping or late or not process.is_alive():
            process.kill()
            process.join()
            if late:
                print(f"error: a worker did not load {config.directory} within {LOAD_SECONDS} s", file=sys.stderr)
            return None, 0 if stopping else max(process.exitcode or 0, 1)
    return process, 0


def _stop(running: list, grace: float, stopping: list, forward) -> int:
    """Drain ``running`` (SIGTERM, unless a signal already went to them: a second one makes
    uvicorn exit at once, by that signal) and wait for them (``_join``)."""
    if not stopping:
        forward(signal.SIGTERM, None)
    return _join(running, grace)


def _join(running: list, grace: float) -> int:
    """Wait for the draining workers (each exits within ``grace``): 0 if all exited 0."""
    deadline = time.monotonic() + grace + 10
    for process in running:
        process.join(max(deadline - time.monotonic(), 0))
        if process.is_alive():
            process.kill()
            process.join()
    return max((abs(p.exitcode or 0) for p in running), default=0)


def unguarded(fn, *args) -> int:
    """A worker's exception boundary when its caller gives none: whatever is raised shows."""
    return fn(*args)


def _worker(guard, config, address: tuple, grace: float, log_level: str, loaded) -> None:
    """One worker process: load, tell the supervisor, serve its own socket until drained."""
    sys.exit(guard(_serve, config, address, grace, log_level, loaded))


def _serve(config, address: tuple, grace: float, log_level: str, loaded) -> int:
    server = build(config, grace, log_level=log_level)
    sock = bind(*address, shared=True)
    sock.listen(2048)  # uvicorn's backlog
    loaded.set()
    server.run(sockets=[sock])
    return 0
