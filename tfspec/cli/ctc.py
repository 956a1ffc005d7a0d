"""CTC on lines of frames: ``tfspec data digit-lines``, ``tfspec train`` on such data (CTC and
the framewise baseline, scored by character error rate) and ``tfspec transcribe``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tfspec.cli.fields import from_args
from tfspec.cli.tables import render
from tfspec.cli.types import BEAM, POSITIVE, SEED, integer
from tfspec.errors import TfspecError
from tfspec.train_options import LinesConfig


def cmd_digit_lines(args) -> int:
    from tfspec.data.digits import write_digit_lines

    started = time.perf_counter()
    manifest = write_digit_lines(args.dir, args.train, args.dev, args.test, args.seed)
    for split, counts in manifest["splits"].items():
        print(f"{split}: {counts['lines']:,} lines, {counts['digits']:,} digits, {counts['frames']:,} frames")
    print(f"{manifest['held_out']}; wrote {args.dir} in {time.perf_counter() - started:.1f}s "
          f"(sample PNGs in {Path(args.dir) / 'samples'})")
    return 0


def train_on_lines(spec, args, data: Path | None) -> int:
    """``tfspec train`` with the ctc task: CTC, then the framewise baseline, each with half of
    --max-minutes (--resume continues both from their newest checkpoints); the CTC model
    exported to RUN/onnx; all of them scored on the dev and the held-out test lines."""
    from tfspec.backends.onnx import OnnxModel, export
    from tfspec.backends.torch.training.tasks.ctc import TRAINED, read_lines, score, train_with_baseline, \
        write_results
    from tfspec.backends.torch.training.process import write_config

    run, started = Path(args.out), time.perf_counter()
    config = from_args(LinesConfig, args, max_minutes=args.max_minutes / 2)  # --steps, --warmup left out: its own
    splits = read_lines(spec, data)
    train = splits.pop("train")
    write_config(run, spec, config, {"data": str(data.resolve()), "objectives": list(TRAINED)})
    models, training = train_with_baseline(spec, train, run, config, not args.quiet,
                                           lambda m: print(m, file=sys.stderr), args.resume)
    exported = export(models["ctc"], run / "onnx")
    if not exported.ok:
        raise TfspecError(f"{run / 'onnx'}: ONNX parity check failed: {[str(c) for c in exported.checks if not c.ok]}")
    onnx_model = OnnxModel(run / "onnx", device="cpu")
    scores = score(spec.head, models, lambda frames: decode(onnx_model, frames, 1), splits)
    _report(spec, scores, splits, f"steps: ctc {training['ctc']['steps']:,} ({training['ctc']['minutes']} min), "
            f"framewise {training['framewise']['steps']:,} ({training['framewise']['minutes']} min); whole run "
            f"{(time.perf_counter() - started) / 60:.1f} min; ONNX export in {run / 'onnx'}")
    write_results(run, splits, scores, training, (time.perf_counter() - started) / 60)
    return 0


def _report(spec, scores: dict, splits: dict, footer: str) -> None:
    """Print the CER table: a row per model, a column per split."""
    sizes = ", ".join(f"{len(lines)} {split} lines" for split, lines in splits.items())
    print(f"{spec.name}: character error rate (edits / reference digits) on {sizes}:")
    rows = [[label, *(f"{100 * by_split[s]:.2f}%" for s in splits)] for label, by_split in scores.items()]
    print(render(["model", *(f"{s} CER" for s in splits)], rows), end="")
    print(footer)


def evaluate_run(args, spec, meta: dict) -> int:
    """``tfspec evaluate RUN`` on a run trained on lines: the CER table of its newest checkpoints
    (CTC and framewise, and RUN/onnx when present) on --split."""
    import torch

    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training.checkpoint import load_any_weights
    from tfspec.backends.torch.training.tasks.ctc import TRAINED, score
    from tfspec.cli.models import run_weights
    from tfspec.data.digits import read_digit_lines

    run, data = Path(args.run), Path(args.data or meta["data"])
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {}
    for objective in TRAINED:
        load_any_weights(model := build_module(spec), run_weights(run / objective, None))
        models[objective] = model.eval()
    lines = read_digit_lines(data, args.split)[:args.limit]
    exported = OnnxModel(run / "onnx", device="cpu") if (run / "onnx" / "tfspec.json").is_file() else None
    splits = {args.split: lines}
    _report(spec, score(spec.head, models, exported and (lambda frames: decode(exported, frames, 1)), splits),
            splits, f"checkpoints: the newest in {run}/{{ctc,framewise}}")
    return 0


def decode(model, frames: np.ndarray, beam: int) -> str:
    """The text an exported CTC model reads in (n, features) frames."""
    from tfspec.ctc import greedy, prefix_beam_search

    head = model.spec.head
    log_probs = model.run("model", ["log_probs"], {"frames": frames[None].astype(model.dtype),
                                                   "lengths": np.array([len(frames)], dtype=np.int64)})[0][0]
    ids = greedy(log_probs, head.blank) if beam == 1 else prefix_beam_search(log_probs, beam, head.blank)
    return "".join(head.symbols[i] for i in ids)


def read_frames(path: Path, features: int, max_len: int | None) -> np.ndarray:
    """(n, features) float32 frames from a .npy array (as stored, never unpickled) or an image
    (greyscale, ``features`` pixels high, columns as frames, intensities / 255)."""
    if path.suffix.lower() == ".npy":
        try:
            frames = np.load(path, allow_pickle=False)
        except (ValueError, EOFError) as e:  # truncated, pickled or not an array file
            raise TfspecError(f"{path}: not a readable .npy array ({str(e).splitlines()[0][:200]})") from None
        if frames.ndim != 2 or frames.shape[1] != features or frames.dtype.kind not in "fiu":
            raise TfspecError(f"{path}: expected a numeric (frames, {features}) array, got {frames.dtype} "
                              f"{frames.shape}")
    else:
        frames = _image_columns(path, features, max_len)
    if not 1 <= len(frames) <= (max_len or len(frames)):
        raise TfspecError(f"{path}: {len(frames)} frames; this model reads 1 to {max_len}")
    frames = frames.astype(np.float32)
    if not np.isfinite(frames).all():
        raise TfspecError(f"{path}: holds NaN or infinite values")
    return frames


def _image_columns(path: Path, features: int, max_len: int | None) -> np.ndarray:
    from tfspec.data.pixels import read_image

    pixels = read_image(path, "L", " (or pass a .npy array)").astype(np.float32)
    height, width = pixels.shape
    if height != features or (max_len and width > max_len):
        raise TfspecError(f"{path}: a {width} x {height} image; this model reads images {features} pixels "
                          f"high{f' and at most {max_len} wide' if max_len else ''}")
    return pixels.T / 255.0


def cmd_transcribe(args) -> int:
    from tfspec.backends.onnx import OnnxModel

    model = OnnxModel(args.model, device="cpu", threads=args.threads)
    spec = model.spec
    if spec.spectrogram is not None:  # Whisper: a WAV file through its encoder and decoder
        print(decode_speech(model, Path(args.input), args.max_new))
        return 0
    if spec.image_encoder is not None:  # TrOCR: an image of a text line through its encoder and decoder
        print(decode_image(model, Path(args.input), args.beam, args.max_new))
        return 0
    if (spec.frames is None and spec.waveform is None) or getattr(spec.head, "kind", None) != "ctc" or \
            "log_probs" not in {o.name for o in model.sessions["model"].get_outputs()}:
        raise TfspecError(f"{args.model}: {spec.name} is not a CTC model reading frames or a waveform; transcribe "
                          "takes the export of a spec with frames or a waveform and a ctc head")
    if spec.waveform is not None:  # wav2vec 2.0, HuBERT: a WAV file
        print(decode_waveform(model, Path(args.input), args.beam))
        return 0
    print(decode(model, read_frames(Path(args.input), spec.frames.features, spec.positional.table_rows), args.beam))
    return 0


def decode_waveform(model, path: Path, beam: int) -> str:
    """The text an exported waveform CTC model reads in a WAV file: its samples averaged to mono,
    resampled to 16 kHz and normalised as Wav2Vec2FeatureExtractor's defaults do (tfspec.data.waveform)."""
    from tfspec.ctc import greedy, prefix_beam_search
    from tfspec.data.audio import read_wav
    from tfspec.data.waveform import Normalisation

    values, mask = Normalisation().batch([read_wav(path)])
    log_probs = model.run("model", ["log_probs"], {"input_values": values.astype(model.dtype),
                                                   "attention_mask": mask})[0][0]
    head = model.spec.head
    ids = greedy(log_probs, head.blank) if beam == 1 else prefix_beam_search(log_probs, beam, head.blank)
    return "".join(head.symbols[i] for i in ids)


def decode_speech(model, path: Path, max_new: int) -> str:
    """What an exported Whisper-style model hears in a WAV file: its samples at the feature
    extractor's rate (``preprocessor_config.json``), the features its spectrogram reads
    (``speech_features``: Whisper's first window, Speech2Text's filterbank frames), then greedy
    decoding after the prompt its ``generation_config.json`` forces (``tfspec.transcription``);
    the export's tokenizer's text, else the token ids."""
    from tfspec.data.codecs import open_codec
    from tfspec.transcription import Prompt, transcribe

    features = speech_features(model, path).astype(model.dtype)
    prompt = Prompt.read(model.directory, model.spec.vocab.bos_id)
    ids = transcribe(model.decoder(), features, prompt, max_new)[0]
    codec = open_codec(model.directory, model.spec.vocab)
    return codec.decode(ids) if codec is not None else " ".join(map(str, ids))


def decode_image(model, path: Path, beam: int, max_new: int) -> str:
    """The text an exported image-to-text model (TrOCR) reads in an image file: its pixels prepared
    as the checkpoint's ``preprocessor_config.json`` says (``tfspec.data.pixels``), then greedy or beam
    search from the decoder's start token ranked by summed log-probability (``generate``'s
    length_penalty 0, early_stopping); the export's tokenizer's text, else the token ids."""
    from tfspec.data.codecs import open_codec
    from tfspec.data.pixels import Preprocessing, read_image
    from tfspec.search import SearchOptions, search

    pixels = Preprocessing.read(model.directory).batch([read_image(path)]).astype(model.dtype)
    ids = search(model.decoder(), pixels, SearchOptions(beam=beam, alpha=0.0, max_extra=max_new, max_length=max_new))[0]
    codec = open_codec(model.directory, model.spec.vocab)
    return codec.decode(ids) if codec is not None else " ".join(map(str, ids))


def speech_features(model, path: Path) -> np.ndarray:
    """The (1, ...) features of a WAV file as the export's spectrogram reads them: Whisper's log-mel
    window (1, mels, frames) (``tfspec.data.audio``), or for a subsampler (Speech2Text) the whole
    file's filterbank frames (1, frames, mels) (``tfspec.data.fbank``), each as the checkpoint's
    ``preprocessor_config.json`` sets it."""
    from tfspec.data.audio import FrontEnd, log_mel, read_wav
    from tfspec.data.fbank import FilterBank, filterbank

    spectrogram = model.spec.spectrogram
    if spectrogram.subsampler is None:
        front = FrontEnd.read(model.directory)
        return log_mel(read_wav(path, front.sampling_rate), front)[None]
    bank = FilterBank.read(model.directory)
    if bank.num_mel_bins != spectrogram.mels:
        raise TfspecError(f"{model.directory}: its feature extractor gives {bank.num_mel_bins} mel bins; the model "
                          f"reads {spectrogram.mels}")
    frames = filterbank(read_wav(path, bank.sampling_rate), bank)
    if len(frames) > spectrogram.frames:
        raise TfspecError(f"{path}: {len(frames)} frames of 10 ms; this model reads at most {spectrogram.frames} "
                          f"({spectrogram.positions} positions)")
    return frames[None]


def register_data(action) -> None:
    """``tfspec data digit-lines``, as an action of ``tfspec data``."""
    a = action("digit-lines", cmd_digit_lines, "compose lines of handwritten digits for CTC (scikit-learn's digits)",
               "Compose lines of 3-8 of scikit-learn's 8x8 handwritten digits (load_digits), each stretched to "
               "0.7-1.6x its width, with random gaps; the columns are the frames (8 features each) and the "
               "digit string the labelling. Training lines draw on the first 80% of the samples, dev lines on the "
               "next 10% and test lines on the last 10% (contiguous blocks, so no dev or test image is seen in "
               "training: choose specs and budgets on dev, report test). Writes DIR/manifest.json, "
               "DIR/{train,dev,test}.npz and .txt, and a few test lines as PNGs in DIR/samples. `tfspec train SPEC "
               "--data DIR` then trains a CTC model (examples/ctc-digits.yaml) and a framewise baseline.")
    a.add_argument("dir", metavar="DIR", help="directory to write (created if needed)")
    a.add_argument("--train", type=integer(1, 10**6), default=12000, help="training lines (default 12000)")
    a.add_argument("--dev", type=integer(1, 10**6), default=500, help="dev lines, for choices (default 500)")
    a.add_argument("--test", type=integer(1, 10**6), default=500, help="held-out test lines (default 500)")
    a.add_argument("--seed", type=SEED, default=0)


def register(command) -> None:
    c = command("transcribe", cmd_transcribe,
                "Run an exported CTC model (`tfspec export` of a spec with frames and a ctc head, or RUN/onnx of "
                "`tfspec train` on digit lines) on INPUT and print the decoded text: a .npy array of (frames, "
                "features) numbers (loaded without pickle), or a greyscale image as high as the model's features, "
                "read column by column with intensities / 255 (ink bright, as the training lines). Best path "
                "decoding, or prefix beam search with --beam N > 1. A waveform model (wav2vec 2.0, HuBERT) reads "
                "a PCM WAV file instead, averaged to mono, resampled to 16 kHz and normalised to zero mean and unit "
                "variance; a Whisper export reads one too (its first 30 s: log-mel features as the checkpoint's "
                "feature extractor computes them, greedy decoding after the prompt its generation_config.json "
                "forces, the text in the export's tokenizer, else token ids), as does a Speech2Text export (the "
                "whole file's Kaldi filterbank frames, normalised per utterance). An image-to-text export (TrOCR) "
                "reads an image file, prepared as its preprocessor_config.json says, and prints the text its greedy "
                "(or --beam N) search reads in it.")
    c.add_argument("model", metavar="EXPORT_DIR")
    c.add_argument("input", metavar="INPUT",
                   help="a .npy array or an image file (PNG); a WAV file for a waveform or Whisper model")
    c.add_argument("--beam", type=BEAM, default=1, help="prefix beam width (default 1: best path)")
    c.add_argument("--max-new", type=integer(1, 448), default=128,
                   help="Whisper: most tokens decoded after the prompt (default 128; the decoder holds 448)")
    c.add_argument("--threads", type=POSITIVE, help="onnxruntime threads")
