"""``tfspec serve``: an exported directory behind HTTP (tfspec.serve; docs/serve.md)."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
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
    listening = from_args(Listening, args)
    workers = f", {listening.workers} workers" if listening.workers > 1 else ""

    def announce(port: int) -> None:  # once bound: --port 0 prints the port the kernel picked
        print(f"serving {args.model} on http://{listening.host}:{port}{workers} (SIGTERM drains within "
              f"{listening.grace:g}s)", file=sys.stderr, flush=True)
    with served(args.model) as directory:
        config = from_args(ServeConfig, args, directory=directory)
        return serve(config, listening, guard=guarded, announce=announce)


@contextlib.contextmanager
def served(model: str):
    """The export to serve: ``model`` itself, or, for a Hugging Face checkpoint directory, its
    export in tfspec's format (the step graphs the server decodes with, parity checked), written
    into a scratch directory that lives as long as the server."""
    from tfspec.cli.models import checkpoint_directory

    checkpoint = checkpoint_directory(model)
    if checkpoint is None:
        yield Path(model)
        return
    from tfspec.cli import parser
    from tfspec.cli.deploy import cmd_export

    scratch = Path(tempfile.mkdtemp(prefix="tfspec-serve-"))
    try:
        print(f"serve: {checkpoint} is a Hugging Face checkpoint; exporting it to {scratch} first", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):  # the export's report is a log line here
            code = cmd_export(parser(["export"]).parse_args(["export", str(checkpoint), "-o", str(scratch / "export")]))
        if code != 0:
            raise TfspecError(f"{checkpoint}: its export failed the parity checks above; not serving it")
        yield scratch / "export"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def register(command) -> None:
    c = command("serve", cmd_serve,
                "Serve an export directory over HTTP: POST /v1/translate (ids or text), and for decoder-only "
                "models OpenAI's /v1/completions, /v1/chat/completions (with a chat template) and /v1/models; "
                "GET /health, /ready, /metrics (Prometheus). Concurrent requests are decoded together; a full "
                "queue answers 503 (streams too, before their first byte), a late one 504. SIGTERM drains: "
                "/ready turns false, requests in flight (streams to their last chunk) finish, the process exits 0. "
                "docs/serve.md")
    c.add_argument("model", metavar="DIR", help="a directory written by `tfspec export`, or a Hugging Face checkpoint "
                                                "directory (exported on the fly into a scratch directory)")
    add_fields(c, Listening)
    add_fields(c, ServeConfig)
