"""The chat template of ``/v1/chat/completions`` (``chat``), where the export's tokenizer has
one: an imported Hugging Face directory's ``chat_template.jinja`` (transformers >= 4.43
saves it so) or the ``chat_template`` of its ``tokenizer_config.json`` (Llama 3, Qwen2,
Mistral Instruct, Gemma ship one). The messages are rendered as transformers'
``apply_chat_template(..., add_generation_prompt=True)`` renders them: jinja2's
``ImmutableSandboxedEnvironment`` with transformers' options, filters and globals, the
tokenizer's special tokens (``bos_token``, ...) as variables. The text is tokenized without
adding special tokens (the template writes them) and continued as a completion is.

The template is untrusted input: it runs sandboxed (``sandbox``: with a deadline and a cap on
its output) and off the event loop; one that does not
compile stops ``tfspec serve`` at start (an ``error:`` line), and one that fails on a request's
messages (``raise_exception``, a missing field) answers that request with one JSON error.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tfspec.errors import TfspecError
from tfspec.serve.errors import ApiError
from tfspec.serve.sandbox import environment, render
from tfspec.untrusted import read_json

MAX_TEMPLATE_BYTES = 2**20
"""A chat template's size at most (published ones are a few kB; Qwen3's is 4 kB)."""


class ChatTemplate:
    """A compiled chat template and the special tokens it is rendered with."""

    def __init__(self, source: str, tokens: dict[str, str], where: Path):
        import jinja2
        from jinja2.ext import loopcontrols

        env = environment(trim_blocks=True, lstrip_blocks=True, extensions=[_generation_tag(), loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals |= {"raise_exception": _raise, "strftime_now": lambda f: datetime.now().strftime(f),
                        "namespace": _namespace()}
        try:
            self.template = env.from_string(source)
        except jinja2.TemplateError as e:
            raise TfspecError(f"{where}: the chat template does not compile: {e}") from None
        self.tokens = tokens

    def render(self, messages: list[dict]) -> str:
        """The prompt text of ``messages``, ending where the assistant's answer starts, within
        ``sandbox``'s deadline and size (the caller runs it off the event loop: it may take that long)."""
        try:
            return render(self.template, messages=messages, tools=None, documents=None, add_generation_prompt=True,
                          **self.tokens)
        except ApiError:
            raise
        except Exception as e:  # the template is code from the checkpoint: whatever it raises, the request fails
            raise ApiError(422, f"the model's chat template refused the messages: {e}", "messages") from None


def read_chat_template(directory: Path) -> ChatTemplate | None:
    """``directory``'s chat template (module docstring), or None when it has none."""
    config, tokens, source = directory / "tokenizer_config.json", {}, None
    try:
        if config.is_file():
            data = read_json(config)
            data = data if isinstance(data, dict) else {}
            source = data.get("chat_template")
            if isinstance(source, list):  # named templates: the default one
                source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"),
                              None)
            for name, value in data.items():
                value = value.get("content") if isinstance(value, dict) else value
                if name.endswith("_token") and isinstance(value, str):
                    tokens[name] = value
        jinja = directory / "chat_template.jinja"
        if jinja.is_file():
            if jinja.stat().st_size > MAX_TEMPLATE_BYTES:
                raise ValueError(f"over {MAX_TEMPLATE_BYTES:,} bytes")
            source = jinja.read_text(encoding="utf-8")
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise TfspecError(f"{directory}: its chat template cannot be read: {e}") from None
    if source is not None and not isinstance(source, str):
        raise TfspecError(f"{config}: chat_template: a string or a list of {{name, template}} expected")
    return None if source is None else ChatTemplate(source, tokens, directory)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """transformers' ``tojson``: plain JSON (jinja2's own escapes HTML characters)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    """What templates call to refuse a conversation (roles that do not alternate, ...)."""
    import jinja2

    raise jinja2.TemplateError(message)


def _namespace():
    """jinja2's ``namespace`` refusing underscore names, as transformers' does (no way to CPython internals)."""
    import jinja2

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            for name in dict(*args[1:], **kwargs):
                Namespace.check(name)
            jinja2.utils.Namespace.__init__(*args, **kwargs)

        def __setitem__(self, name, value):
            Namespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {name!r}")
    return Namespace


def _generation_tag():
    """transformers' ``{% generation %}`` block (it marks the assistant's text for training
    masks; SmolLM3's and some Qwen templates use it): rendered as its body."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()
    return Generation

