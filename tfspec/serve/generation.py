"""What the OpenAI routes share: a prompt's room in the model's positions, a request's search
options, one prompt queued, awaited and read as text. With continuous batching
(``scheduler``) every request shares the running batch and picks its own tokens; with static
batching too, greedy and sampled requests share a batch, each row drawing with its own
generator (``watched``). Either way a ``seed`` gives the tokens ``tfspec generate --sample
--seed`` gives with the same top-k (a request's ``top_k``, by default ``--max-top-k``)."""

from __future__ import annotations

import uuid
from dataclasses import replace

from tfspec.search import Sampling, SearchOptions
from tfspec.serve.detokenize import Detokenizer
from tfspec.serve.errors import ApiError
from tfspec.serve.logits import Tweaks
from tfspec.serve.schemas import MAX_NEW_TOKENS
from tfspec.serve.service import Service


def room(service: Service, ids: list[int], max_tokens: int | None, field: str) -> int:
    """Tokens a prompt of ``ids`` may get: ``max_tokens`` (None: all), within the model's positions."""
    left = service.limit - len(ids) if service.limit is not None else MAX_NEW_TOKENS
    if not ids or left < 1:
        raise ApiError(413 if ids else 422, f"the prompt is {len(ids)} tokens; the model takes 1 to "
                       f"{(service.limit or 2) - 1}", field)
    return min(left, max_tokens or MAX_NEW_TOKENS)


def options_of(body, new: int, max_top_k: int) -> SearchOptions:
    """The request's search options. A draw is among the ``max_top_k`` likeliest tokens at most
    (``ServeConfig.max_top_k``): asking the step for the whole vocabulary sorted it and copied it
    to the host per row per step, for tokens a draw almost never reaches; a larger ``top_k`` is
    refused (422), as it cannot be honoured."""
    if body.top_k > max_top_k:
        raise ApiError(422, f"top_k {body.top_k} is more than this server's --max-top-k ({max_top_k})", "top_k")
    sampling = None if body.temperature == 0 else Sampling(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k if body.top_k > 0 else max_top_k,
        seed=body.seed if body.seed is not None else uuid.uuid4().int % 2**32)
    return SearchOptions(beam=1, max_extra=new, max_length=new, sampling=sampling,
                         min_length=new if body.ignore_eos else min(body.min_tokens, new))


def tweaks_of(service: Service, body) -> Tweaks | None:
    """The request's penalties, biases and log-probabilities, checked (422 naming the field);
    None where it asks for none."""
    bias = []
    for key, value in (body.logit_bias or {}).items():
        if not key.isdigit() or int(key) >= service.spec.vocab.size:
            raise ApiError(422, f"logit_bias: {key!r} is not a token id (0..{service.spec.vocab.size - 1})",
                           f"logit_bias.{key}")
        bias.append((int(key), value))
    tweaks = Tweaks(body.presence_penalty, body.frequency_penalty, tuple(sorted(bias)), body.top_logprobs_wanted)
    return None if tweaks == Tweaks() else tweaks


def usage(prompt: int, completion: int) -> dict:
    """OpenAI's ``usage`` object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def check(body, new: int) -> None:
    """What pydantic cannot see alone: fields that depend on each other (422 naming one)."""
    if body.stream_options is not None and not body.stream:
        raise ApiError(422, "stream_options: only with stream: true", "stream_options")
    if body.min_tokens > new:
        raise ApiError(422, f"min_tokens ({body.min_tokens}) is more than the {new} tokens this prompt may get "
                       "(max_tokens, within the model's positions)", "min_tokens")


class Generation:
    """One prompt queued for decoding, and its continuation as text: read token by token in the
    decoding thread (``Detokenizer``), so that a stop string ends the row there; ``on_text`` is
    given each piece of text a stream may send and the tokens it settles (called in that thread).
    An export without a tokenizer reads no text: its answers carry token ids."""

    def __init__(self, service: Service, body, ids: list[int], new: int, on_text=None):
        self.ids, self.new, self.on_text, self.out = ids, new, on_text, []
        check(body, new)
        decode = None if service.codec is None else service.codec.decode
        self.text = Detokenizer(decode, ids, body.stops, body.min_tokens)
        options, tweaks = options_of(body, new, service.config.max_top_k), tweaks_of(service, body)
        # without masks in the step graph, only prompts of one length share a batch; each row
        # draws with its own generator (``Watched``), so greedy and sampled rows share one
        key = ("complete", replace(options, sampling=None), None if service.ragged else len(ids))
        self.job = service.admit([ids], options, key, self._watch, tweaks)

    def _watch(self, token: int) -> bool:
        stop = self.text.push(token)
        if self.on_text is not None:
            self.on_text(self.text.release(), self.text.settled)
        return stop

    async def result(self, service: Service, request, started: float) -> list[int]:
        """The tokens decoded (``Service.wait``), the text read to its end."""
        self.out = (await service.wait(request, self.job, started))[0]
        self.text.finish(self.out)
        return self.out

    @property
    def finish_reason(self) -> str:
        """OpenAI's: ``stop`` at a stop string or the end of sequence, else ``length``."""
        return "stop" if self.text.stopped or len(self.out) < self.new else "length"
