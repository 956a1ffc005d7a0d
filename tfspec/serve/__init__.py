"""``tfspec serve``: an exported model behind HTTP, with dynamic batching, limits, metrics and an
OpenAI-compatible API for decoder-only models (docs/serve.md). Needs the ``serve`` extra."""

from tfspec.serve.app import create_app
from tfspec.serve.launch import serve
from tfspec.serve.service import ServeConfig

__all__ = ["ServeConfig", "create_app", "serve"]
