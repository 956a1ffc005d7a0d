"""``tfspec serve``: an exported model behind HTTP, with dynamic batching, limits, metrics and an
OpenAI-compatible API for decoder-only models (docs/serve.md). Needs the ``serve`` extra."""

from tfspec.serve.app import ServeConfig, create_app
from tfspec.serve.server import serve

__all__ = ["ServeConfig", "create_app", "serve"]
