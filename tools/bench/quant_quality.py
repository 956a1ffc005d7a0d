"""What quantised weights cost in quality, measured in onnxruntime on held-out text.

A decoder-only model trained with `tfspec train` (examples/llama-lm.yaml on a corpus's text)
is exported as float32, `--int8`, `--int4` (round to nearest) and `--int4 --int4-calibrate`
(activation-aware scales from training lines), each by the CLI as a user would. On the held-out
split (the test lines of the corpus's target language, which training never saw) every export
gives: perplexity (exp of the mean negative log-likelihood of each next token, end of sentence
included), next-token agreement with float32 (teacher-forced argmax), greedy agreement (tokens
equal to float32's when each continues the first 4 tokens of a line alone for 24 tokens) and
the mean KL divergence KL(fp32 || export) of the next-token distributions. The same weights
also go out as a Hugging Face Llama checkpoint (`export --format hf`) and come back through
`tfspec import`: the imported checkpoint's exports are scored the same way (no published
checkpoint is reachable offline, so the imported one is this trained model's own).

    python tools/bench/quant_quality.py RUN --data CORPUS --lang en     # RUN: a `tfspec train` directory
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p over the last axis, in float64 (sums of many small terms follow)."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def scores(logits: np.ndarray, reference: np.ndarray, targets: np.ndarray) -> dict:
    """Sums over positions (rows of ``logits``, [N, V]) of: the negative log-likelihood of
    ``targets``, KL(reference || logits)'s distributions, argmax equal to the reference's;
    and the count of positions. Sums add across batches; ``summary`` turns them into means."""
    logp, ref = log_softmax(logits), log_softmax(reference)
    nll = -logp[np.arange(len(targets)), targets]
    kl = (np.exp(ref) * (ref - logp)).sum(axis=-1)
    return {"nll": float(nll.sum()), "kl": float(kl.sum()), "agree": int((logits.argmax(-1) == reference.argmax(-1)).sum()),
            "n": len(targets)}


def summary(total: dict) -> dict:
    """Perplexity, mean KL and next-token agreement from summed ``scores``."""
    return {"perplexity": float(np.exp(total["nll"] / total["n"])), "kl": total["kl"] / total["n"],
            "next_token_agreement": total["agree"] / total["n"]}


def exports(source: Path, out: Path, calibration: Path) -> dict[str, Path]:
    """Name -> export directory of ``source`` (a run or an import), by `tfspec export`: fp32,
    int8 and, where this tfspec has `--int4`, int4 round-to-nearest and activation-aware."""
    tfspec = str(Path(sys.executable).with_name("tfspec"))
    flags = {"fp32": [], "int8": ["--int8"]}
    if "--int4" in subprocess.run([tfspec, "export", "--help"], capture_output=True, text=True).stdout:
        flags |= {"int4 RTN": ["--int4"], "int4 AWQ": ["--int4", "--int4-calibrate", str(calibration)]}
    dirs = {}
    for name, extra in flags.items():
        dirs[name] = out / name.replace(" ", "-")
        subprocess.run([tfspec, "export", str(source), "-o", str(dirs[name]), *extra], check=True,
                       stdout=subprocess.DEVNULL)
    return dirs


def teacher_forced(models: dict, lines: list[list[int]], batch: int = 32) -> dict:
    """Name -> ``summary`` of every model on ``lines`` (BOS + ids + EOS), float32 the reference."""
    totals = {name: {"nll": 0.0, "kl": 0.0, "agree": 0, "n": 0} for name in models}
    order = sorted(lines, key=len)
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        width = max(map(len, rows))
        ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int64)
        mask = np.array([[j < len(r) for j in range(width)] for r in rows], np.int64)  # <unk> is id 0 too
        real = mask[:, 1:].astype(bool)
        targets = ids[:, 1:][real]
        out = {name: m.logits(tgt=ids, attention_mask=mask)[:, :-1][real] for name, m in models.items()}
        for name in models:
            for key, value in scores(out[name], out["fp32"], targets).items():
                totals[name][key] += value
    return {name: summary(t) for name, t in totals.items()}


def greedy(models: dict, lines: list[list[int]], prompt: int = 4, new: int = 24) -> dict:
    """Name -> the share of tokens equal to float32's when each model continues the first
    ``prompt`` tokens of every line greedily for ``new`` tokens (tfspec's KV-cached search)."""
    from tfspec.search import SearchOptions, search

    rows = np.array([r[:prompt] for r in lines if len(r) >= prompt], np.int64)
    options = SearchOptions(beam=1, min_length=new, max_length=new, max_extra=new)
    out = {name: np.array(search(m.decoder(), None, options, rows)) for name, m in models.items()}
    return {name: float((o == out["fp32"]).mean()) for name, o in out.items()}


def measure(source: Path, work: Path, lines: list[list[int]], calibration: Path, threads: int) -> dict:
    """Name -> every measure of ``source``'s exports on ``lines``."""
    from tfspec.backends.onnx import OnnxModel

    models = {name: OnnxModel(d, device="cpu", threads=threads) for name, d in exports(source, work, calibration).items()}
    forced, agree = teacher_forced(models, lines), greedy(models, lines[:64])
    return {name: forced[name] | {"greedy_agreement": agree[name]} for name in models}


def model_directory(run: Path, work: Path) -> Path:
    """``run``'s spec, newest weights and tokenizer as one directory (the layout `tfspec import`
    writes): `export --int4-calibrate` reads its calibration text with the tokenizer beside the spec."""
    import shutil

    import yaml

    from tfspec.cli.models import run_spec, run_weights

    _, meta = run_spec(run)
    out = work / "trained-model"
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(yaml.safe_dump(meta["spec"]))
    shutil.copy(run_weights(run, None), out / "model.safetensors")
    shutil.copy(run / meta.get("tokenizer", "tokenizer.model"), out / "tokenizer.model")
    return out


def reimported(trained: Path, work: Path) -> Path:
    """The trained weights written as a Hugging Face checkpoint (`export --format hf`, the
    tokenizer beside them) and read back by `tfspec import`, the path every published model takes."""
    import shutil

    tfspec = str(Path(sys.executable).with_name("tfspec"))
    subprocess.run([tfspec, "export", str(trained), "--format", "hf", "-o", str(work / "hf")], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.copy(trained / "tokenizer.model", work / "hf" / "tokenizer.model")
    subprocess.run([tfspec, "import", str(work / "hf"), "-o", str(work / "imported"), "--quiet"], check=True)
    return work / "imported"


def held_out(run: Path, data: Path, lang: str, limit: int) -> list[list[int]]:
    """The first ``limit`` test lines of ``data`` in ``lang`` as BOS + ids + EOS by ``run``'s tokenizer."""
    from tfspec.cli.models import run_spec
    from tfspec.data.codecs import open_codec

    spec, _ = run_spec(run)
    codec = open_codec(run, spec.vocab)
    texts = (data / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:limit]
    v = spec.vocab
    return [[v.bos_id, *codec.encode(t)[:126], v.eos_id] for t in texts if t.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a `tfspec train` directory of a decoder-only spec")
    p.add_argument("--data", type=Path, required=True, help="its corpus (test split held out)")
    p.add_argument("--lang", default="en", help="the language the model was trained on (its --tgt)")
    p.add_argument("--lines", type=int, default=1000, help="held-out lines scored")
    p.add_argument("--work", type=Path, required=True, help="directory for the exports")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    lines = held_out(args.run, args.data, args.lang, args.lines)
    calibration = args.work / "calibration.txt"
    args.work.mkdir(parents=True, exist_ok=True)
    calibration.write_text("\n".join((args.data / f"train.{args.lang}").read_text().splitlines()[:256]) + "\n")
    trained = model_directory(args.run, args.work)
    imported = reimported(trained, args.work)
    results = {"trained": measure(trained, args.work / "trained", lines, calibration, args.threads),
               "imported": measure(imported, args.work / "imported-exports", lines, calibration,
                                   args.threads)}
    print(f"{len(lines)} held-out lines of {args.data / f'test.{args.lang}'}, {sum(map(len, lines)) - len(lines)} "
          f"next tokens; greedy: 64 lines, 4 prompt tokens + 24")
    print("| model | export | perplexity | vs fp32 | next-token agreement | greedy agreement | KL(fp32 ‖ export) |")
    print("|---|---|---|---|---|---|---|")
    for model, rows in results.items():
        for name, r in rows.items():
            print(f"| {model} | {name} | {r['perplexity']:.2f} | {r['perplexity'] / rows['fp32']['perplexity'] - 1:+.1%} "
                  f"| {r['next_token_agreement']:.1%} | {r['greedy_agreement']:.1%} | {r['kl']:.2e} |")


if __name__ == "__main__":
    main()
