"""tfspec against optimum on encoders and speech: classification latency and Whisper decoding.

For each model (default bert, vit, whisper), transformers writes a random checkpoint of a published
shape (in optimum's own environment, whose transformers it pins): BERT-base with a two-label
sequence classifier (128 tokens), ViT-base/16 with a 1,000-class image classifier (224 x 224),
Whisper-base (6 + 6 layers, d_model 512, 30 s of log-mel features of tests/data/speech.wav). Both
tools start from that directory as a user would: ``optimum-cli export onnx --task
text-classification`` (``image-classification``, ``automatic-speech-recognition-with-past``),
``tfspec export DIR`` (its own graphs) and, for the classifiers, ``tfspec export DIR --format
optimum``. Each export runs in a fresh process, timed, with its peak RSS and bytes on disk. Then,
each in a fresh process of its own every round (tools/bench/isolated.py), the same threads:

    tfspec                  tfspec's runtime over its own export (``OnnxModel.run``; Whisper:
                            its KV-cached greedy search, ``tfspec transcribe``'s)
    optimum                 ``ORTModelForSequenceClassification`` / ``ORTModelForImageClassification``
                            / ``ORTModelForSpeechSeq2Seq.generate`` over optimum's export
    optimum on tfspec       the classifiers: optimum's class over tfspec's ``--format optimum``
                            export (the graphs compared under one driver)
    optimum bare            the optimum column's control (``python -I tools/bench/peer_bare.py``)

Classifiers: milliseconds per call at batch 1 and 32 (3 calls a round after a warm-up) and items
per second. Whisper: exactly 64 greedy tokens at batch 1 and 8, tokens/s. Before timing, each
engine's logits are compared with transformers' (largest difference), Whisper's tokens with
``generate``'s. A peer column more than 10% below its bare speed marks the table INVALID (exit 1).

    python tools/bench/bench_encoders.py --save encoders                 # all three
    python tools/bench/bench_encoders.py --models vit --layers 2 --rounds 1   # a smoke run

Needs optimum-onnx in a virtual environment of its own (``--optimum-python``, default
``.venv-optimum/bin/python``: README, "References").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bandwidth import cpu_name  # noqa: E402
from bench_optimum import disk, finish, measured, optimum_options  # noqa: E402
from isolated import Job, conditions, interleave, with_bare  # noqa: E402
from peer_bare import invalid, peak_rss, timed  # noqa: E402
from results import Table  # noqa: E402

TAKES = "~15 minutes on 2 quiet cores (all three models, 3 rounds)"
"""How long a run takes (tools/README.md lists it)."""
ROOT = Path(__file__).resolve().parents[2]
SPEECH = ROOT / "tests" / "data" / "speech.wav"
BATCHES = {"bert": (1, 32), "vit": (1, 32), "whisper": (1, 8)}
TASKS = {"bert": ("text-classification", "text"), "vit": ("image-classification", "image"),
         "whisper": ("automatic-speech-recognition-with-past", None)}
WRITE = """\
import sys, numpy as np, torch, transformers
name, path, layers, speech = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
if name == "bert":
    config = transformers.BertConfig(num_hidden_layers=layers or 12, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
elif name == "vit":
    config = transformers.ViTConfig(num_hidden_layers=layers or 12, num_labels=1000)
    model = transformers.ViTForImageClassification(config)
else:
    layers = layers or 6
    config = transformers.WhisperConfig(d_model=512, encoder_layers=layers, decoder_layers=layers,
                                        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                                        decoder_ffn_dim=2048, begin_suppress_tokens=None, suppress_tokens=None)
    model = transformers.WhisperForConditionalGeneration(config)
    model.generation_config.forced_decoder_ids = None
    extractor = transformers.WhisperFeatureExtractor()
    extractor.save_pretrained(path)
    import wave
    with wave.open(speech) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    np.save(path + "/features.npy", extractor(pcm, sampling_rate=16000, return_tensors="np").input_features)
model.eval().save_pretrained(path)
print(sum(p.numel() for p in model.parameters()))
"""


def inputs(name: str, work: Path, hf: Path) -> dict[str, str]:
    """Batch -> the file of that batch's inputs: token ids and masks (.npz), pixels (.npz), or
    log-mel features (.npy: the speech file's, repeated)."""
    rng, out = np.random.default_rng(0), {}
    for b in BATCHES[name]:
        path = work / f"{name}-{b}.{'npy' if name == 'whisper' else 'npz'}"
        if name == "bert":
            np.savez(path, input_ids=rng.integers(1000, 30000, (b, 128)), attention_mask=np.ones((b, 128), np.int64),
                     token_type_ids=np.zeros((b, 128), np.int64))
        elif name == "vit":
            np.savez(path, pixel_values=rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
        else:
            np.save(path, np.repeat(np.load(hf / "features.npy"), b, axis=0))
        out[str(b)] = str(path)
    return out


def ours_encode(threads: int, directory: str, inputs: dict, check: bool = False):
    """In a worker: ``peer_bare.optimum_encode`` for tfspec's runtime over its own export."""
    from tfspec.backends.onnx import OnnxModel

    model = OnnxModel(directory, device="cpu", threads=threads)
    rename = {"input_ids": "src", "token_type_ids": "segments"}
    feeds = [{rename.get(k, k): v for k, v in np.load(path).items()} for path in inputs.values()]
    run = lambda feed: model.run("model", ["logits"], feed)[0]  # noqa: E731
    if check:
        return run(feeds[0]).tolist()
    return {"seconds": timed([lambda f=f: run(f) for f in feeds], [lambda f=f: run(f) for f in feeds], 3),
            "rss": peak_rss()}


def ours_speech(threads: int, directory: str, features: dict, n: int, check: bool = False):
    """In a worker: ``peer_bare.speech_generate`` for tfspec's KV-cached greedy search."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search

    model = OnnxModel(directory, device="cpu", threads=threads)
    dec = model.decoder()
    batches = [np.load(path).astype(model.dtype) for path in features.values()]
    options = lambda k: SearchOptions(beam=1, min_length=k, max_length=k, max_extra=k)  # noqa: E731
    run = lambda x, k: search(dec, x, options(k))  # noqa: E731
    if check:
        return [list(map(int, row)) for row in run(batches[0], n)]
    return {"seconds": timed([lambda x=x: run(x, n) for x in batches], [lambda x=x: run(x, 8) for x in batches]),
            "rss": peak_rss()}


def prepare(args, name: str, work: Path) -> tuple[int, dict, dict[str, Job], dict]:
    """(parameters, export name -> (seconds, peak RSS, bytes), the timing jobs, the inputs)."""
    import subprocess

    hf = work / name
    params = int(subprocess.run([args.optimum_python, "-c", WRITE, name, str(hf), str(args.layers), str(SPEECH)],
                                check=True, capture_output=True, text=True).stdout.split()[-1])
    tfspec, cli = str(Path(sys.executable).with_name("tfspec")), str(Path(args.optimum_python).with_name("optimum-cli"))
    task, kind = TASKS[name]
    exports = {"optimum": [cli, "export", "onnx", "--model", str(hf), "--task", task, str(work / "optimum")],
               "tfspec": [tfspec, "export", str(hf), "-o", str(work / "tfspec"), "--no-check"]}
    if kind is not None:
        exports["tfspec --format optimum"] = [tfspec, "export", str(hf), "--format", "optimum", "-o",
                                              str(work / "hub"), "--no-check"]
    made = {}
    for export, command in exports.items():
        seconds, rss = measured(command)
        made[export] = (seconds, rss, disk(Path(command[-2] if command[-1] == "--no-check" else command[-1])))
    given = inputs(name, work, hf)
    optimum = ("torch", "onnxruntime", "transformers")
    if kind is None:
        jobs = {"tfspec": Job("bench_encoders", "ours_speech", ("onnxruntime",),
                              {"directory": str(work / "tfspec"), "features": given, "n": args.new}),
                "optimum": Job("peer_bare", "speech_generate", optimum, {"model": str(work / "optimum"),
                               "features": given, "n": args.new, "optimum": True}, python=args.optimum_python)}
    else:
        jobs = {"tfspec": Job("bench_encoders", "ours_encode", ("onnxruntime",),
                              {"directory": str(work / "tfspec"), "inputs": given}),
                **{engine: Job("peer_bare", "optimum_encode", optimum, {"model": str(work / folder), "inputs": given,
                                                                     "task": kind}, python=args.optimum_python)
                   for engine, folder in (("optimum", "optimum"), ("optimum on tfspec", "hub"))}}
    return params, made, with_bare(jobs, ["optimum"]), given


def agreement(args, name: str, work: Path, jobs: dict, given: dict) -> str:
    """Each engine's first-batch outputs against transformers': the largest logit difference, or
    Whisper's tokens equal."""
    engines = {engine: job.but(kwargs={"check": True}) for engine, job in jobs.items() if not engine.endswith(" bare")}
    if TASKS[name][1] is None:
        ref = Job("peer_bare", "speech_generate", ("torch", "transformers"),
                  {"model": str(work / name), "features": given, "n": args.new, "check": True},
                  python=args.optimum_python).run(args.threads)[0]
        got = {engine: job.run(args.threads)[0] for engine, job in engines.items()}
        total = sum(map(len, ref))
        return "greedy tokens equal to transformers' generate: " + ", ".join(
            f"{e} {sum(a == b for r, o in zip(ref, out) for a, b in zip(r, o))}/{total}" for e, out in got.items())
    ref = np.array(Job("peer_bare", "hf_logits", ("torch", "transformers"),
                       {"model": str(work / name), "inputs": given, "task": TASKS[name][1]},
                       python=args.optimum_python).run(args.threads)[0])
    return "largest |logit - transformers'| at batch 1: " + ", ".join(
        f"{e} {np.abs(np.array(job.run(args.threads)[0]) - ref).max():.1e}" for e, job in engines.items())


def report(args, name: str, params: int, made: dict, agrees: str, results: dict) -> tuple[list[Table], list[str]]:
    """The model's two tables (printed); the reasons it is invalid."""
    title = f"### {name}: {params / 1e6:.0f}M parameters\n\n{agrees}"
    exports = Table(["export", "seconds", "peak RSS (MiB)", "on disk (MiB)"], ["", ".1f", ".0f", ".0f"],
                    [[e, seconds, rss / 2**20, size / 2**20] for e, (seconds, rss, size) in made.items()], title)
    names, reasons, rows = list(results), [], []
    speech = TASKS[name][1] is None
    unit = "tok/s" if speech else "items/s"
    for i, batch in enumerate(BATCHES[name]):
        seconds = {n: statistics.median(r["seconds"][i] for r in results[n]) for n in names}
        speed = {n: batch * (args.new if speech else 1) / seconds[n] for n in names}
        rows.append([batch, *([] if speech else [seconds["tfspec"] * 1e3, seconds["optimum"] * 1e3]),
                     *(speed[n] for n in names), *(speed[n] / speed["optimum"] for n in names
                                                  if n in ("tfspec", "optimum on tfspec"))])
        if why := invalid(f"optimum ({name}, batch {batch})", speed["optimum"], speed["optimum bare"]):
            reasons.append(why)
    ratios = [f"{n} / optimum" for n in names if n in ("tfspec", "optimum on tfspec")]
    latency = [] if speech else ["tfspec (ms)", "optimum (ms)"]
    peak = {n: max(r["rss"] for r in results[n]) for n in names}
    speeds = Table(["batch", *latency, *(f"{n} ({unit})" for n in names), *ratios],
                   ["d", *[".1f"] * len(latency), *[".1f"] * len(names), *[".2f"] * len(ratios)], rows,
                   notes=["peak RSS (MiB): " + ", ".join(f"{n} {peak[n] / 2**20:.0f}" for n in names)])
    print("\n" + exports.markdown() + "\n\n" + speeds.markdown())
    return [exports, speeds], reasons


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert,vit,whisper", help="comma-separated: bert, vit, whisper")
    for name, default, what in (("layers", 0, "layers per stack (0: the published depth)"),
                                ("new", 64, "Whisper: tokens generated"), ("rounds", 3, "rounds (medians)"),
                                ("threads", 2, "threads of every engine")):
        p.add_argument(f"--{name}", type=int, default=default, help=what)
    args = optimum_options(p)
    header = (f"tfspec against optimum-onnx on encoders: {args.threads} threads, float32, median of {args.rounds} "
              f"rounds, each engine in a fresh process of its own every round; {cpu_name()}; {conditions()}")
    print(header)
    reasons, tables = [], []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-encoders-{name}-") as tmp:
            work = Path(tmp)
            params, made, jobs, given = prepare(args, name, work)
            agrees = agreement(args, name, work, jobs, given)
            results = interleave(jobs, args.rounds, args.threads)
            made_tables, why = report(args, name, params, made, agrees, results)
            tables, reasons = tables + made_tables, reasons + why
    finish(args, header, tables, reasons)


if __name__ == "__main__":
    main()
