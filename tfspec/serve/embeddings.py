"""OpenAI's ``POST /v1/embeddings`` for text-embedding exports (``tasks``: an embedding head
pooling token ids, CLIP's or SigLIP's text tower): each input tokenized as transformers'
``tokenizer(text)`` does (token ids taken as sent), the full-sequence graph run once per length,
its ``logits`` port (the embedding, as the model gives it: unnormalised for CLIP) returned as
floats or as base64 of little-endian float32, the encoding OpenAI's client asks for by default."""

from __future__ import annotations

import base64
from typing import Annotated, Literal, Optional

import numpy as np
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tfspec.errors import TfspecError
from tfspec.serve.errors import ApiError
from tfspec.serve.schemas import MAX_LINES, Ids, Line, OpenAIBody, either
from tfspec.serve.service import Service, validated
from tfspec.serve.tasks import EMBEDDINGS, require

Inputs = either("a string, a list of strings, a list of token ids or a list of such lists",
                string=Line, strings=Annotated[list[Line], Field(min_length=1, max_length=MAX_LINES)],
                numbers=Ids, lists=Annotated[list[Ids], Field(min_length=1, max_length=MAX_LINES)])
"""OpenAI's ``input``: a text, texts, token ids or lists of them."""


class EmbeddingRequest(OpenAIBody):
    """OpenAI's ``/v1/embeddings``."""

    input: Inputs
    model: str = Field(max_length=256)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = Field(None, ge=1, description="the model's own width only")
    user: Optional[str] = Field(None, max_length=256, description="ignored")

    @property
    def many(self) -> bool:
        """Whether ``input`` is a list of inputs (texts or token-id lists)."""
        return isinstance(self.input, list) and not isinstance(self.input[0], int)

    @property
    def inputs(self) -> list[str | list[int]]:
        """Each input: a text, or token ids."""
        return list(self.input) if self.many else [self.input]


async def embeddings(service: Service, request: Request, started: float) -> Response:
    raw = await service.raw(request)
    require(service, EMBEDDINGS)
    body = validated(EmbeddingRequest.model_validate_json, raw)
    width = service.spec.head.width
    if body.dimensions not in (None, width):
        raise ApiError(422, f"dimensions: {body.dimensions}; this model's embeddings have {width} features (tfspec "
                       "does not shorten them: they were not trained to be cut)", "dimensions")
    service.fits(len(body.inputs), "input")
    ids, vectors = await service.batcher.run(service, started, _embedded, service, body)  # tokenizing too: off the loop
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
            for i, v in enumerate(vectors)]
    tokens = sum(map(len, ids))
    return JSONResponse({"object": "list", "data": data, "model": service.spec.name,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def _embedded(service: Service, body: EmbeddingRequest) -> tuple[list[list[int]], list[np.ndarray]]:
    """(token ids, embedding) of each input (on the runner's thread)."""
    fields = [f"input.{i}" if body.many else "input" for i in range(len(body.inputs))]
    ids = [_tokens(service, x, field) for x, field in zip(body.inputs, fields)]
    return ids, embed(service.model, ids)


def _tokens(service: Service, value: str | list[int], field: str) -> list[int]:
    """An input's token ids: a text as the tokenizer reads it, ids as sent; within the positions."""
    if isinstance(value, list):
        ids = service.within_vocabulary(value, field)
    elif service.codec is None:
        raise ApiError(400, f"{service.config.directory}: no tokenizer to read text with; send token ids", field)
    else:
        try:
            ids = service.codec.encode(value)
        except TfspecError as e:
            raise ApiError(422, str(e), field) from None
    if not ids or (service.limit is not None and len(ids) > service.limit):
        raise ApiError(400, f"{len(ids)} tokens; the model reads 1 to {service.limit}", field)
    return ids


def embed(model, ids: list[list[int]]) -> list[np.ndarray]:
    """The embedding of each token-id list: inputs of one length run together (no padding, so
    each is what it is alone), every token attended."""
    out: list[np.ndarray] = [np.empty(0)] * len(ids)
    for length in sorted({len(x) for x in ids}):
        rows = [i for i, x in enumerate(ids) if len(x) == length]
        src = np.array([ids[i] for i in rows], np.int64)  # (B, length)
        vectors = model.run("model", ["logits"], {"src": src, "attention_mask": np.ones_like(src)})[0]
        for i, vector in zip(rows, vectors.astype(np.float32)):  # (width,) each
            out[i] = vector
    return out


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    """OpenAI's encodings: floats, or base64 of the little-endian float32 bytes."""
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


routes = [(EMBEDDINGS, "POST", embeddings, True)]
