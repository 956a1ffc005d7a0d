"""``tfspec serve``: an exported model behind HTTP, with dynamic batching, limits, metrics and an
OpenAI-compatible API for decoder-only models (docs/serve.md). Needs the ``serve`` extra.

The names are imported on first use (PEP 562), so that ``config`` (the options, which the
command line is built from) imports without the extra: the server's modules import starlette."""

from __future__ import annotations

from tfspec import lazy_names

_HOMES = {"ServeConfig": "tfspec.serve.config", "Listening": "tfspec.serve.config",
          "create_app": "tfspec.serve.app", "serve": "tfspec.serve.launch"}
"""Each public name and the module it is imported from."""

__all__ = list(_HOMES)

__getattr__ = lazy_names(__name__, _HOMES)
