"""Request bodies. Strict (``"5"`` is not an id, ``true`` is not a beam) and closed (an unknown
field, often a typo, is an error naming it): a malformed request is answered 422 with the field's
path, never guessed at. OpenAI's bodies take ``null`` where OpenAI documents it (``OpenAIBody``)."""

from __future__ import annotations

import typing
from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, WrapValidator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import ErrorType

MAX_LINES = 256
"""Lines in one request: larger jobs belong to ``tfspec translate`` (or several requests)."""
MAX_CHARS = 100_000
"""Characters in one line or prompt (as ``tfspec translate`` limits a line)."""
MAX_NEW_TOKENS = 4096
MAX_LOGPROBS = 20
"""Alternatives reported per token at most (OpenAI's chat limit; vLLM's default)."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Line = Annotated[str, Field(max_length=MAX_CHARS)]
ERROR_TYPES = frozenset(typing.get_args(ErrorType))


def _kind(value) -> str | None:
    """The JSON kind that picks a member of an ``either`` union: a string, or a list named by
    its first item (an empty list reads as a list of strings)."""
    if isinstance(value, str):
        return "string"
    if not isinstance(value, list):
        return None
    first = value[0] if value else ""
    return ("strings" if isinstance(first, str) else "numbers" if isinstance(first, (int, float))
            else "lists" if isinstance(first, list) else "objects")


def either(what: str, **members):
    """A union of ``members`` (a JSON kind, ``_kind``, -> its type), the member picked by the
    value's kind, whose errors are that member's alone at the field's own path. pydantic's plain
    union answers with every member's error under the member's name: a list of five stop strings
    read ``stop.constrained-str: Input should be a valid string`` where the list is too long."""
    def untagged(value, handler):
        try:
            return handler(value)
        except ValidationError as e:
            errors = e.errors()
            if not all(err["loc"] and err["loc"][0] in members for err in errors):
                raise  # the kind matched no member: the discriminator's own error, at the field
            located = [_located(err, err["loc"][1:]) for err in errors]
            raise ValidationError.from_exception_data(e.title, located) from None
    union = Union[tuple(Annotated[kind, Tag(tag)] for tag, kind in members.items())]
    return Annotated[union, Discriminator(_kind, custom_error_type="kind_type",
                                          custom_error_message=f"Input should be {what}"), WrapValidator(untagged)]


def _located(error: dict, loc: tuple) -> dict:
    """``error`` (as ``ValidationError.errors`` gives it) at ``loc``, to raise again."""
    kind = error["type"] if error["type"] in ERROR_TYPES else PydanticCustomError(error["type"], error["msg"])
    return {"type": kind, "loc": loc, "input": error["input"]} | ({"ctx": error["ctx"]} if "ctx" in error else {})


class TranslateRequest(Body):
    """``tfspec translate`` over HTTP: the same options and defaults."""

    ids: Optional[list[list[int]]] = Field(None, max_length=MAX_LINES, description="token ids per line, without EOS")
    text: Optional[list[Line]] = Field(None, max_length=MAX_LINES, description="lines of text (needs a tokenizer)")
    beam: int = Field(4, ge=1, le=16, description="beam size; 1 is greedy")
    alpha: float = Field(0.6, ge=0, le=10, description="GNMT length penalty")
    max_extra: int = Field(50, ge=0, le=1024, description="output may exceed input length by this")

    @model_validator(mode="after")
    def _one_input(self):
        if (self.ids is None) == (self.text is None):
            raise ValueError("give exactly one of 'ids' and 'text'")
        return self


class OpenAIBody(Body):
    """A body of OpenAI's API: an optional field sent as ``null`` takes its default, as OpenAI
    documents (its clients send ``"temperature": null``); OpenAI's fields that tfspec does not
    implement (``unasked``) are accepted as null only, what leaving them out means."""

    unasked: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data):
        if not isinstance(data, dict):
            return data
        asked = [k for k in cls.unasked if data.get(k) is not None]
        if asked:
            raise ValidationError.from_exception_data(cls.__name__, [
                {"type": PydanticCustomError("unsupported", "not supported by tfspec serve (null or left out only)"),
                 "loc": (k,), "input": data[k]} for k in asked])
        optional = {name for name, f in cls.model_fields.items() if not f.is_required()} | set(cls.unasked)
        return {k: v for k, v in data.items() if v is not None or k not in optional}


class StreamOptions(OpenAIBody):
    include_usage: bool = Field(False, description="a last chunk with the usage and no choices")
    continuous_usage_stats: bool = Field(False, description="vLLM's: the usage so far in every chunk (guidellm sends it)")


Stop = Annotated[str, Field(min_length=1, max_length=256)]
Ids = Annotated[list[int], Field(min_length=1, max_length=MAX_CHARS)]
Prompt = either("a string, a list of strings, a list of token ids or a list of such lists",
                string=Line, strings=Annotated[list[Line], Field(min_length=1, max_length=MAX_LINES)],
                numbers=Ids, lists=Annotated[list[Ids], Field(min_length=1, max_length=MAX_LINES)])
"""OpenAI's ``prompt``: text, texts, token ids or lists of them (load generators send ids)."""


class Sampled(OpenAIBody):
    """The fields OpenAI's completion routes share (and vLLM's ``top_k``, ``min_tokens``,
    ``ignore_eos``, which common clients send as extra fields), all honoured."""

    model: str = Field(max_length=256)
    temperature: float = Field(1.0, ge=0, le=2, description="0 is greedy; else tokens are drawn")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1, le=2**31 - 1, description="draw among the k likeliest; 0 or -1: all")
    seed: Optional[int] = Field(None, ge=0, lt=2**63)
    stop: Optional[either("a string or a list of strings", string=Stop,
                          strings=Annotated[list[Stop], Field(max_length=4)])] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    n: int = Field(1, ge=1, le=1, description="choices per prompt: 1")
    user: Optional[str] = Field(None, max_length=256, description="ignored")
    min_tokens: int = Field(0, ge=0, le=MAX_NEW_TOKENS, description="no end of sequence nor stop string before")
    ignore_eos: bool = Field(False, description="decode to max_tokens whatever the model's end of sequence")
    presence_penalty: float = Field(0.0, ge=-2, le=2, description="taken from a token's logit once it was used")
    frequency_penalty: float = Field(0.0, ge=-2, le=2, description="taken from a token's logit per use")
    logit_bias: Optional[dict[Annotated[str, Field(max_length=12)], Annotated[float, Field(ge=-100, le=100)]]] = \
        Field(None, max_length=1024, description="token id (a string) -> added to its logit")

    @property
    def stops(self) -> list[str]:
        return [] if self.stop is None else [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(Sampled):
    """OpenAI's ``/v1/completions``."""

    unasked = ("best_of", "suffix")

    prompt: Prompt
    max_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS, description="most tokens generated (OpenAI's default 16)")
    echo: bool = Field(False, description="the prompt's text before the completion's")
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_LOGPROBS, description="each token's and the n likeliest")

    @property
    def many(self) -> bool:
        """Whether ``prompt`` is a list of prompts (texts or token-id lists)."""
        return isinstance(self.prompt, list) and not isinstance(self.prompt[0], int)

    @property
    def prompts(self) -> list[str | list[int]]:
        """Each prompt: a text, or token ids."""
        return list(self.prompt) if self.many else [self.prompt]

    @property
    def top_logprobs_wanted(self) -> Optional[int]:
        return self.logprobs


class TextPart(Body):
    type: Literal["text"]
    text: Line


class Message(Body):
    """One chat message, as OpenAI's client sends it; the template sees it as these fields."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: either("a string or a list of text parts", string=Line,
                    objects=Annotated[list[TextPart], Field(max_length=64)])
    name: Optional[str] = Field(None, max_length=256)


class ChatRequest(Sampled):
    """OpenAI's ``/v1/chat/completions``."""

    unasked = ("audio", "metadata", "modalities", "moderation", "prediction", "prompt_cache_key",
               "prompt_cache_retention", "reasoning_effort", "safety_identifier", "service_tier", "store", "verbosity")

    messages: list[Message] = Field(min_length=1, max_length=MAX_LINES)
    max_tokens: Optional[int] = Field(None, ge=1, le=MAX_NEW_TOKENS, description="default: the model's room")
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=MAX_NEW_TOKENS, description="max_tokens' new name")
    logprobs: bool = Field(False, description="each token's log-probability")
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_LOGPROBS, description="with logprobs: the n likeliest")

    @property
    def top_logprobs_wanted(self) -> Optional[int]:
        return (self.top_logprobs or 0) if self.logprobs else None
