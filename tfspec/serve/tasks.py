"""What an export serves: the routes its spec's parts can answer, asked of the export once, at
load (``Service.serves``), and read by every route's handler (``require``) and ``/v1/models``.

- a decoder-only model's step graph: ``/v1/completions`` (and ``/v1/chat/completions`` where its
  tokenizer has a chat template);
- an encoder-decoder whose encoder reads source tokens: ``/v1/translate``;
- a log-mel spectrogram in (Whisper; not yet Speech2Text's filterbank frames), or a waveform read
  by a CTC head (wav2vec 2.0, HuBERT): ``/v1/audio/transcriptions``, as ``tfspec transcribe``
  reads a WAV file;
- an embedding head pooling token ids (CLIP's or SigLIP's text tower): ``/v1/embeddings``.
"""

from __future__ import annotations

from tfspec.serve.errors import ApiError
from tfspec.spec.embedding_heads import TEXT_POOLING

COMPLETIONS, CHAT, TRANSLATE = "/v1/completions", "/v1/chat/completions", "/v1/translate"
TRANSCRIPTIONS, EMBEDDINGS = "/v1/audio/transcriptions", "/v1/embeddings"


def served(model, chat: bool) -> tuple[str, ...]:
    """The POST routes ``model`` (an ``OnnxModel``) answers; ``chat``: its tokenizer has a template."""
    spec, head = model.spec, model.spec.head
    kind = getattr(head, "kind", None)
    if spec.spectrogram is not None:
        return (TRANSCRIPTIONS,) if getattr(spec.spectrogram, "subsampler", None) is None else ()
    if spec.waveform is not None and kind == "ctc" and "log_probs" in _ports(model, "model", "outputs"):
        return (TRANSCRIPTIONS,)
    if kind == "embedding" and head.pooling in TEXT_POOLING:
        return (EMBEDDINGS,)
    if "decoder" not in model.manifest["graphs"]:
        return ()
    if spec.family == "decoder-only":
        return (COMPLETIONS, CHAT) if chat else (COMPLETIONS,)
    return (TRANSLATE,) if "src" in _ports(model, "encoder", "inputs") else ()  # not an image's (TrOCR)


def _ports(model, graph: str, side: str) -> set[str]:
    """The names graph ``graph`` of the export takes (``inputs``) or computes (``outputs``)."""
    if graph not in model.manifest["graphs"]:
        return set()
    return {port.name for port in getattr(model.sessions[graph], f"get_{side}")()}


def decodes(routes: tuple[str, ...]) -> bool:
    """Whether these routes decode step by step (the batcher's work) rather than run the graph once."""
    return COMPLETIONS in routes or TRANSLATE in routes


def require(service, route: str, param: str | None = "model") -> None:
    """400 in OpenAI's shape unless ``service``'s export answers ``route``, naming what it does answer."""
    if route not in service.serves:
        what = ", ".join(f"POST {r}" for r in service.serves) or "none of the model routes"
        raise ApiError(400, f"{service.spec.name} ({service.spec.family}) does not serve POST {route}; it serves "
                       f"{what}", param)
