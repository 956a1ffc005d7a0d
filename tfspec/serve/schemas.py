"""Request bodies. Strict (``"5"`` is not an id, ``true`` is not a beam) and closed (an unknown
field, often a typo, is an error naming it): a malformed request is answered 422 with the field's
path, never guessed at."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


class StreamOptions(Body):
    include_usage: bool = Field(False, description="a last chunk with the usage and no choices")
    continuous_usage_stats: bool = Field(False, description="vLLM's: the usage so far in every chunk (guidellm sends it)")


class Sampled(Body):
    """The fields OpenAI's completion routes share (and vLLM's ``top_k``, ``min_tokens``,
    ``ignore_eos``, which common clients send as extra fields), all honoured."""

    model: str = Field(max_length=256)
    temperature: float = Field(1.0, ge=0, le=2, description="0 is greedy; else tokens are drawn")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1, le=2**31 - 1, description="draw among the k likeliest; 0 or -1: all")
    seed: Optional[int] = Field(None, ge=0, lt=2**63)
    stop: Union[None, Annotated[str, Field(min_length=1, max_length=256)],
                Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=4)]] = None
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

    prompt: Union[Line, Annotated[list[Line], Field(min_length=1, max_length=MAX_LINES)]]
    max_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS, description="most tokens generated (OpenAI's default 16)")
    echo: bool = Field(False, description="the prompt's text before the completion's")
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_LOGPROBS, description="each token's and the n likeliest")

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    @property
    def top_logprobs_wanted(self) -> Optional[int]:
        return self.logprobs


class TextPart(Body):
    type: Literal["text"]
    text: Line


class Message(Body):
    """One chat message, as OpenAI's client sends it; the template sees it as these fields."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[Line, Annotated[list[TextPart], Field(max_length=64)]]
    name: Optional[str] = Field(None, max_length=256)


class ChatRequest(Sampled):
    """OpenAI's ``/v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1, max_length=MAX_LINES)
    max_tokens: Optional[int] = Field(None, ge=1, le=MAX_NEW_TOKENS, description="default: the model's room")
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=MAX_NEW_TOKENS, description="max_tokens' new name")
    logprobs: bool = Field(False, description="each token's log-probability")
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_LOGPROBS, description="with logprobs: the n likeliest")

    @property
    def top_logprobs_wanted(self) -> Optional[int]:
        return (self.top_logprobs or 0) if self.logprobs else None
