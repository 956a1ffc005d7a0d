"""``tfspec serve``: an exported directory behind HTTP (tfspec.serve; docs/serve.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from tfspec.cli import guarded
from tfspec.cli.fields import add_fields, from_args
from tfspec.errors import TfspecError
from tfspec.serve.config import Listening, ServeConfig


def cmd_serve(args) -> int:
    try:
        from tfspec.serve import serve
    except ImportError as e:
        raise TfspecError(f"tfspec serve needs {e.name}: pip install 'tfspec[serve]'") from None
    config = from_args(ServeConfig, args, directory=Path(args.model))
    listening = from_args(Listening, args)
    workers = f", {listening.workers} workers" if listening.workers > 1 else ""

    def announce(port: int) -> None:  # once bound: --port 0 prints the port the kernel picked
        print(f"serving {args.model} on http://{listening.host}:{port}{workers} (SIGTERM drains within "
              f"{listening.grace:g}s)", file=sys.stderr, flush=True)
    return serve(config, listening, guard=guarded, announce=announce)


def register(command) -> None:
    c = command("serve", cmd_serve,
                "Serve an export directory over HTTP: POST /v1/translate (ids or text), and for decoder-only "
                "models OpenAI's /v1/completions, /v1/chat/completions (with a chat template) and /v1/models; "
                "GET /health, /ready, /metrics (Prometheus). Concurrent requests are decoded together; a full "
                "queue answers 503 (streams too, before their first byte), a late one 504. SIGTERM drains: "
                "/ready turns false, requests in flight (streams to their last chunk) finish, the process exits 0. "
                "docs/serve.md")
    c.add_argument("model", metavar="DIR", help="a directory written by `tfspec export`")
    add_fields(c, Listening)
    add_fields(c, ServeConfig)
