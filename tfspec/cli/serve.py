"""``tfspec serve``: an exported directory behind HTTP (tfspec.serve; docs/serve.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from tfspec.cli import guarded
from tfspec.cli.types import THREADS, integer, number
from tfspec.errors import TfspecError


def cmd_serve(args) -> int:
    try:
        from tfspec.serve import ServeConfig, serve
    except ImportError as e:
        raise TfspecError(f"tfspec serve needs {e.name}: pip install 'tfspec[serve]'") from None
    config = ServeConfig(Path(args.model), max_batch_tokens=args.max_batch_tokens, max_queue=args.max_queue,
                         timeout=args.timeout, threads=args.threads, batching=args.batching,
                         body_timeout=args.body_timeout, header_timeout=args.header_timeout, max_top_k=args.max_top_k,
                         max_connections=args.max_connections)
    workers = f", {args.workers} workers" if args.workers > 1 else ""

    def announce(port: int) -> None:  # once bound: --port 0 prints the port the kernel picked
        print(f"serving {args.model} on http://{args.host}:{port}{workers} (SIGTERM drains within {args.grace:g}s)",
              file=sys.stderr, flush=True)
    return serve(config, args.host, args.port, args.grace, workers=args.workers, guard=guarded, announce=announce)


def register(command) -> None:
    c = command("serve", cmd_serve,
                "Serve an export directory over HTTP: POST /v1/translate (ids or text), and for decoder-only "
                "models OpenAI's /v1/completions, /v1/chat/completions (with a chat template) and /v1/models; "
                "GET /health, /ready, /metrics (Prometheus). Concurrent requests are decoded together; a full "
                "queue answers 503 (streams too, before their first byte), a late one 504. SIGTERM drains: "
                "/ready turns false, requests in flight (streams to their last chunk) finish, the process exits 0. "
                "docs/serve.md")
    c.add_argument("model", metavar="DIR", help="a directory written by `tfspec export`")
    c.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    c.add_argument("--port", type=integer(0, 65535), default=8000,
                   help="port (default 8000; 0: any free one, printed once bound)")
    c.add_argument("--max-batch-tokens", type=integer(1, 2**24), default=8192,
                   help="source or prompt tokens decoded together at most (default 8192)")
    c.add_argument("--max-queue", type=integer(1, 2**20), default=256,
                   help="prompts (or lines) waiting at most, each counted; more are answered 503 with Retry-After, "
                        "a request of more than this 413 (default 256)")
    c.add_argument("--timeout", type=number(0, 86400, low_open=True), default=60.0,
                   help="seconds a request may take; later: 504 and its work is cancelled (default 60)")
    c.add_argument("--body-timeout", type=number(0, 3600, low_open=True), default=10.0,
                   help="seconds a request body may take to arrive; later: 408 (default 10)")
    c.add_argument("--header-timeout", type=number(0, 3600, low_open=True), default=10.0,
                   help="seconds a connection may take to send a request's headers, from its opening or its last "
                        "answer; later it is closed, however it trickles (default 10)")
    c.add_argument("--max-top-k", type=integer(1, 2**20), default=256,
                   help="sampling draws among this many likeliest tokens at most (a request's top_k 0 or -1 "
                        "means this many; more: 422): the step copies only these to the host (default 256; "
                        "transformers' generate draws among 50, llama.cpp among 40)")
    c.add_argument("--max-connections", type=integer(1, 2**20), default=None,
                   help="open connections at most: a new one closes the one idle the longest, and a request on one "
                        "more than this while all are busy is answered 503 at once (default: 1000, or fewer where "
                        "the process may open fewer files)")
    c.add_argument("--threads", type=THREADS, help="onnxruntime threads of each worker (default: all cores, "
                   "shared out among the workers)")
    c.add_argument("--workers", type=integer(1, 256), default=1,
                   help="server processes sharing the port, each with its own model and queue (default 1)")
    c.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                   help="decoder-only models: prompts join and leave the running batch at each step (continuous, "
                        "the default where the step graph takes masks) or a batch runs to its end (static)")
    c.add_argument("--grace", type=number(0, 3600, low_open=True), default=30.0,
                   help="seconds SIGTERM's drain may take before the process exits (default 30)")
