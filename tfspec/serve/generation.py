"""What the OpenAI routes share: a prompt's room in the model's positions, a request's search
options, one prompt queued and awaited, and its continuation as text. With continuous batching
(``scheduler``) every request shares the running batch and picks its own tokens; with static
batching greedy requests are batched with each other and sampled ones decode alone. Either way a
``seed`` gives the tokens ``tfspec generate --sample --seed`` gives."""

from __future__ import annotations

import uuid

from tfspec.search import Sampling, SearchOptions
from tfspec.serve.batcher import Job
from tfspec.serve.errors import ApiError
from tfspec.serve.schemas import MAX_NEW_TOKENS
from tfspec.serve.service import Service


def room(service: Service, ids: list[int], max_tokens: int | None, field: str) -> int:
    """Tokens a prompt of ``ids`` may get: ``max_tokens`` (None: all), within the model's positions."""
    left = service.limit - len(ids) if service.limit is not None else MAX_NEW_TOKENS
    if not ids or left < 1:
        raise ApiError(413 if ids else 422, f"the prompt is {len(ids)} tokens; the model takes 1 to "
                       f"{(service.limit or 2) - 1}", field)
    return min(left, max_tokens or MAX_NEW_TOKENS)


def options_of(body, new: int) -> SearchOptions:
    sampling = None if body.temperature == 0 else Sampling(
        temperature=body.temperature, top_p=body.top_p,
        seed=body.seed if body.seed is not None else uuid.uuid4().int % 2**32)
    return SearchOptions(beam=1, max_extra=new, max_length=new, sampling=sampling)


class Completion:
    """One prompt's continuation as text: the decoded whole less the decoded prompt (tokenizers
    that drop a leading space keep it this way), cut at the first stop string."""

    def __init__(self, service: Service, prompt: list[int], stops: list[str]):
        self.codec, self.prompt, self.stops = service.codec, prompt, stops
        self.head = self.codec.decode(prompt)
        self.stopped = False

    def text(self, new: list[int]) -> str:
        whole = self.codec.decode(self.prompt + new)
        text = whole[len(self.head):] if whole.startswith(self.head) else self.codec.decode(new)
        cuts = [text.find(s) for s in self.stops if s in text]
        self.stopped = bool(cuts)
        return text[: min(cuts)] if cuts else text


def submit_one(service: Service, body, ids: list[int], new: int, sink=None) -> Job:
    """Queue one prompt of ``ids`` for ``new`` tokens at most (``Service.admit``)."""
    options = options_of(body, new)
    # without masks in the step graph, only prompts of one length share a batch
    key = ("complete", options, None if service.ragged else len(ids)) if options.sampling is None else \
        ("alone", uuid.uuid4())
    return service.admit([ids], options, key, sink)
