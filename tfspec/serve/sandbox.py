"""Bounds on rendering an untrusted chat template, beyond jinja2's sandbox (which keeps it from
Python's internals but not from time or memory): a deadline, enforced by a trace function on
the template's own compiled code in the rendering thread (a template loops in Python code:
each line checks the clock), and a cap on the characters rendered, counted as the render
streams and checked before a string or list is repeated (``'x' * 10**9`` is one operation)."""

from __future__ import annotations

import sys
import time

from tfspec.serve.errors import ApiError

RENDER_SECONDS = 2.0
"""A render's deadline (published templates render a conversation in about a millisecond)."""
MAX_RENDER_CHARS = 8 * 2**20
"""Characters a render may produce: twice what the largest body (4 MiB) could fill with messages."""


def environment(**options):
    """An ``ImmutableSandboxedEnvironment`` whose repetitions (``*``) and powers (``**``) are bounded."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                seq, times = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) \
                        and len(seq) * times > MAX_RENDER_CHARS:
                    raise _too_large()
            elif isinstance(right, int) and abs(right) > 4096:
                raise ApiError(422, f"the model's chat template raised a number to the power {right}", "messages")
            return super().call_binop(context, operator, left, right)
    return Bounded(**options)


def render(template, **variables) -> str:
    """``template`` rendered with ``variables`` within ``RENDER_SECONDS`` and ``MAX_RENDER_CHARS``."""
    deadline, parts, size = time.monotonic() + RENDER_SECONDS, [], 0

    def line(frame, event, arg):
        if time.monotonic() > deadline:
            raise ApiError(422, f"the model's chat template took over {RENDER_SECONDS:g} seconds on these "
                           "messages", "messages")
        return line

    def call(frame, event, arg):  # only jinja2's compiled templates ("<template>") are traced line by line
        return line if frame.f_code.co_filename == "<template>" else None

    before = sys.gettrace()  # a coverage tool's or debugger's, given back after
    sys.settrace(call)
    try:
        for part in template.generate(**variables):
            size += len(part)
            if size > MAX_RENDER_CHARS:
                raise _too_large()
            parts.append(part)
    finally:
        sys.settrace(before)
    return "".join(parts)


def _too_large() -> ApiError:
    return ApiError(413, f"the model's chat template rendered over {MAX_RENDER_CHARS:,} characters from these "
                    "messages", "messages")
