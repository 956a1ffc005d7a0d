"""What ``tfspec serve`` is told: the model's limits (``ServeConfig``) and where it listens (``Listening``).

Options models (``tfspec.options``): the command's flags are generated from these fields. One
``ServeConfig`` per server process. Imports neither starlette nor uvicorn, so that the command
line is built without the ``serve`` extra."""

from __future__ import annotations

from pathlib import Path
from tfspec.options import THREADS, Options, choice, number, options, whole


@options
class ServeConfig(Options):
    """The model served and its limits: read by ``service.Service`` (queue, body, timeouts),
    ``server.build`` (connections: ``server.connection_limit``; header timeout: ``connections``),
    ``generation.options_of`` (``max_top_k``) and ``scheduler`` (``batching``)."""

    directory: Path
    """A directory written by `tfspec export`."""
    max_batch_tokens: whole(1, 2**24) = 8192
    """Source or prompt tokens decoded together at most; one larger request goes alone."""
    max_queue: whole(1, 2**20) = 256
    """Prompts (or lines) waiting at most, each counted; more are answered 503 with Retry-After, a
    request of more than this 413."""
    timeout: number(0, 86400, low_open=True) = 60.0
    """Seconds a request may take from its arrival to its answer; later: 504 and its work is cancelled."""
    threads: THREADS | None = None
    """onnxruntime threads of each worker (default: all cores, shared out among the workers)."""
    max_body: whole(1, 2**30) = 4 * 2**20
    """Bytes in one request body; more: 413."""
    body_timeout: number(0, 3600, low_open=True) = 10.0
    """Seconds a request body may take to arrive; later: 408 (a slowloris client holds no connection)."""
    header_timeout: number(0, 3600, low_open=True) = 10.0
    """Seconds a connection may take to send a request's headers, from its opening or its last
    answer; later it is closed, however it trickles."""
    max_connections: whole(1, 2**20) | None = None
    """Open connections at most: a new one closes the one idle the longest, and a request on one
    more than this while all are busy is answered 503 at once (default: 1000, or fewer where the
    process may open fewer files)."""
    max_top_k: whole(1, 2**20) = 256
    """Sampling draws among this many likeliest tokens at most (a request's top_k 0 or -1 means
    this many; more: 422): the step copies only these to the host (transformers' generate draws
    among 50, llama.cpp among 40)."""
    batching: choice("continuous", "static") = "continuous"
    """Decoder-only models: prompts join and leave the running batch at each step (continuous,
    where the step graph takes masks) or a batch runs to its end (static, kept to measure the
    difference)."""


@options
class Listening(Options):
    """Where and how ``serve`` listens: the address, the processes sharing it, the drain."""

    host: str = "127.0.0.1"
    """Address to listen on."""
    port: whole(0, 65535) = 8000
    """Port to listen on; 0: any free one, printed once bound."""
    workers: whole(1, 256) = 1
    """Server processes sharing the port, each with its own model and queue."""
    grace: number(0, 3600, low_open=True) = 30.0
    """Seconds SIGTERM's drain may take before the process exits."""
