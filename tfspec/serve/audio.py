"""OpenAI's ``POST /v1/audio/transcriptions`` for speech exports (``tasks``): a WAV file sent as
``multipart/form-data`` (``multipart``) read as ``tfspec transcribe`` reads it, by a Whisper
export (log-mel features of its first 30 s, greedy decoding after the prompt its
``generation_config.json`` forces) or a waveform CTC export (wav2vec 2.0, HuBERT: best path).
Composed of the core pieces ``tfspec transcribe`` is (``tfspec.data.audio``,
``tfspec.transcription``, ``tfspec.ctc``): the server does not import the CLI.

OpenAI's fields: ``file`` and ``model``; ``response_format`` json (``{"text": ...}``) or text;
``temperature`` 0 (tfspec transcribes greedily). A ``language`` or ``prompt`` would change what
is decoded, and verbose_json, srt and vtt need timestamps: each is refused (422) by name."""

from __future__ import annotations

import io
import wave
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from tfspec.errors import TfspecError
from tfspec.serve import multipart
from tfspec.serve.errors import ApiError
from tfspec.serve.service import Service, validated
from tfspec.serve.tasks import TRANSCRIPTIONS, require

MAX_SECONDS = 30
"""Audio a request may hold: Whisper's one window (what ``tfspec transcribe`` reads of it); a
waveform model's attention grows with the square of its length."""
TIMESTAMPED = ("verbose_json", "srt", "vtt")


class TranscriptionForm(BaseModel):
    """The form's text fields, as OpenAI's client sends them (numbers as text, so not strict)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(max_length=256)
    language: Optional[str] = Field(None, max_length=32, description="refused unless empty")
    prompt: Optional[str] = Field(None, description="refused unless empty")
    response_format: Literal["json", "text", "verbose_json", "srt", "vtt"] = "json"
    temperature: float = Field(0.0, ge=0, le=1, description="0 only: greedy")


async def transcriptions(service: Service, request: Request, started: float) -> Response:
    raw = await service.raw(request)
    require(service, TRANSCRIPTIONS)
    fields, files = multipart.parse(raw, request.headers.get("content-type"))
    form = validated(TranscriptionForm.model_validate, fields)
    _refuse_unsupported(form)
    if "file" not in files:
        raise ApiError(422, "file: the audio file is missing (a part with a filename)", "file")
    upload = files["file"]
    _within_limit(upload)
    try:
        text = await service.batcher.run(service, started, _transcribe, service, upload)
    except TfspecError as e:
        raise ApiError(400, str(e), "file") from None
    if form.response_format == "text":
        return PlainTextResponse(text)
    return JSONResponse({"text": text})


def _refuse_unsupported(form: TranscriptionForm) -> None:
    """422 for what tfspec would not honour: each names its field and why."""
    if form.language:
        raise ApiError(422, "language: not supported; tfspec transcribes in the language the export's "
                       "generation_config.json forces, or the one the model picks", "language")
    if form.prompt:
        raise ApiError(422, "prompt: not supported; tfspec transcribes without a previous-text prompt", "prompt")
    if form.temperature != 0:
        raise ApiError(422, f"temperature: {form.temperature:g}; tfspec transcribes greedily (0 only)", "temperature")
    if form.response_format in TIMESTAMPED:
        raise ApiError(422, f"response_format: {form.response_format} needs timestamps, which tfspec does not "
                       "decode; use json or text", "response_format")


def _within_limit(upload: multipart.Upload) -> None:
    """413 for audio over ``MAX_SECONDS`` (read from the WAV header; a malformed header is
    ``read_wav``'s to refuse)."""
    try:
        with wave.open(io.BytesIO(upload.data), "rb") as f:
            seconds = f.getnframes() / max(f.getframerate(), 1)
    except (wave.Error, EOFError):
        return
    if seconds > MAX_SECONDS:
        raise ApiError(413, f"file: {seconds:.1f} s of audio; this server transcribes at most {MAX_SECONDS} s "
                       "per request", "file")


def _transcribe(service: Service, upload: multipart.Upload) -> str:
    """What ``tfspec transcribe`` prints for the upload (on the runner's thread): a Whisper
    export's greedy text after its prompt, in every position the decoder has left, or a waveform
    CTC export's best path (its symbols)."""
    from tfspec.data.audio import read_wav

    audio = io.BytesIO(upload.data)
    audio.name = f"file {upload.filename!r}"
    model = service.model
    if service.spec.spectrogram is None:
        return _best_path(model, read_wav(audio))
    from tfspec.data.audio import FrontEnd, log_mel
    from tfspec.transcription import Prompt, transcribe

    front = FrontEnd.read(model.directory)
    features = log_mel(read_wav(audio, front.sampling_rate), front)[None].astype(model.dtype)  # (1, mels, frames)
    prompt = Prompt.read(model.directory, service.spec.vocab.bos_id)
    ids = transcribe(model.decoder(), features, prompt, service.limit - len(prompt.tokens))[0]
    return service.codec.decode(ids) if service.codec is not None else " ".join(map(str, ids))


def _best_path(model, samples) -> str:
    """A waveform CTC model's best path through 16 kHz ``samples``, normalised as
    Wav2Vec2FeatureExtractor's defaults do (``tfspec.data.waveform``)."""
    from tfspec.ctc import greedy
    from tfspec.data.waveform import Normalisation

    values, mask = Normalisation().batch([samples])
    log_probs = model.run("model", ["log_probs"], {"input_values": values.astype(model.dtype),
                                                   "attention_mask": mask})[0][0]
    head = model.spec.head
    return "".join(head.symbols[i] for i in greedy(log_probs, head.blank))


routes = [(TRANSCRIPTIONS, "POST", transcriptions, True)]
