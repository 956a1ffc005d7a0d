"""Translating a real file: tfspec vs CTranslate2 on the same trained weights and the same lines.

Where `tools/bench_decode.py` times fixed shapes, this times what a server does: the first N
lines of a corpus's test set (mixed lengths), decoded in batches sorted by length. tfspec runs
`tfspec.evaluate.decode_all` on its exported ONNX graphs, the function `tfspec translate`
calls; CTranslate2 runs `translate_batch` with the same batch size over the same token ids
(the run's sentencepiece pieces, end of sentence included). Both stop at end of sentence or at
the model's positions (CTranslate2 has no "source length + 50" limit, so neither uses one), so
each emits its own lengths: the table gives lines/s (the same work for both) and output
tokens/s, and BLEU against the references shows both translate alike (CTranslate2 normalises
beam scores by length^alpha, tfspec by GNMT's ((5 + length) / 6)^alpha, so beam outputs may
differ slightly; greedy outputs should be identical). A last row times the `tfspec translate`
command itself on the same file, process start and tokenisation included.

With ``--shortlist``, tfspec's exports also carry a target-vocabulary shortlist counted over
the run's training pairs (``export --shortlist``), and a second table compares decoding with it
(``translate --shortlist``) against the full vocabulary in the same rounds: lines/s, the ratio,
BLEU of both and the mean number of candidates a batch scores.

    tfspec train small --data DATA --out RUN ...          # any run whose spec CTranslate2 can hold
    python tools/bench_translate.py RUN                    # 500 test lines, greedy and beam 4, fp32 and int8
    python tools/bench_translate.py RUN --shortlist --batch 1 --no-int8   # the shortlist at batch 1
    python tools/bench_translate.py RUN --fused            # the --fused exports (in-place cache)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sacrebleu
import sentencepiece
import torch

from bench_decode import cpu_seconds, ct2_maps, ct2_model, vocabulary
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.cli.models import run_spec, run_weights
from tfspec.data import read_split
from tfspec.data.codecs import TOKENIZER
from tfspec.evaluate import decode_all
from tfspec.search import SearchOptions


def engines(args, spec, model, sp, work: Path, shortlist=None) -> dict:
    """Name -> translate(sources, beam) -> output ids per source, end of sentence left out."""
    import ctranslate2

    limit, eos = spec.positional.max_len - 1, spec.vocab.eos_id
    out = {}
    for suffix, int8 in (("", False), (" int8", True)) if args.int8 else (("", False),):
        directory = work / f"onnx{suffix.strip()}"  # `tfspec translate` (cli_seconds) reads text in "onnx"
        export(model, directory, parity=False, int8=int8, shortlist=shortlist, fused=args.fused)
        shutil.copyfile(args.run / TOKENIZER, directory / TOKENIZER)
        onnx = OnnxModel(directory, device="cpu", threads=args.threads)
        for name, dec in [("tfspec ORT", onnx.decoder())] + ([("tfspec ORT shortlist", Counted(onnx.decoder(
                shortlist=True)))] if shortlist else []):
            out[name + suffix] = lambda src, beam, dec=dec: [o[:-1] if o[-1:] == [eos] else o for o in decode_all(
                dec, src, SearchOptions(beam=beam, alpha=0.6, max_extra=limit, max_length=limit), args.batch)]
            out[name + suffix].decoder = dec
    words = vocabulary(spec)[:4] + [sp.id_to_piece(i) for i in range(4, spec.vocab.size)]
    index = {w: i for i, w in enumerate(words)}
    ct2_model(model, spec, work / "ct2", words)
    for suffix, compute in (("", "float32"), (" int8", "int8")) if args.int8 else (("", "float32"),):
        tr = ctranslate2.Translator(str(work / "ct2"), device="cpu", compute_type=compute,
                                    intra_threads=args.threads, inter_threads=1)

        def run(src, beam, tr=tr):
            res = tr.translate_batch([[words[i] for i in s] for s in src], max_batch_size=args.batch,
                                     beam_size=beam, length_penalty=0.6, max_decoding_length=limit)
            return [[index[t] for t in r.hypotheses[0]] for r in res]
        out["CTranslate2" + suffix] = run
    return out


class Counted:
    """A shortlist decoder that records how many candidates each batch scored."""

    def __init__(self, decoder):
        self.decoder, self.sizes = decoder, []

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def start(self, src):
        state = self.decoder.start(src)
        self.sizes.append(len(self.decoder.candidates))
        return state


def training_shortlist(args, spec, meta, sp):
    """The shortlist `export --shortlist` counts over the run's training pairs (its defaults)."""
    from tfspec.shortlist import build

    vocab, encode = spec.vocab, lambda text: sp.encode(text) + [spec.vocab.eos_id]
    pairs = read_split(args.data or Path(meta["data"]), "train", meta["src"], meta["tgt"])
    return build(((encode(s), encode(t)) for s, t in pairs), vocab.size, vocab.tgt_size,
                 [*vocab.stop_ids, vocab.bos_id, vocab.unk_id])


def cli_seconds(args, directory: Path, lines: list[str], beam: int) -> float:
    """Wall time of `tfspec translate DIR --beam B` on the lines, from process start to exit."""
    tfspec = Path(sys.executable).with_name("tfspec")
    start = time.perf_counter()
    subprocess.run([str(tfspec), "translate", str(directory), "--beam", str(beam), "--threads", str(args.threads)],
                   input="\n".join(lines) + "\n", text=True, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a `tfspec train` run directory")
    p.add_argument("--data", type=Path, help="corpus directory (default: the one the run trained on)")
    p.add_argument("--lines", type=int, default=500, help="first N non-empty test lines (default 500)")
    p.add_argument("--batch", type=int, default=32, help="sentences per batch for both engines (default 32)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-int8", dest="int8", action="store_false")
    p.add_argument("--fused", action="store_true",
                   help="tfspec's exports with onnxruntime's fused operators and the in-place cache (export --fused)")
    p.add_argument("--shortlist", action="store_true",
                   help="also decode with a shortlist counted over the run's training pairs (export --shortlist)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    spec, meta = run_spec(args.run)
    if not ct2_maps(spec):
        sys.exit(f"bench_translate: {spec.name}'s layout is not one ct2_model maps to CTranslate2")
    model = build_module(spec).eval()
    weights = run_weights(args.run, None)
    load_weights(model, weights)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(args.run / TOKENIZER))
    pairs = [pr for pr in read_split(args.data or Path(meta["data"]), "test", meta["src"], meta["tgt"])
             if pr[0].strip()][: args.lines]
    sources = [sp.encode(s)[: spec.positional.max_len - 1] + [spec.vocab.eos_id] for s, _ in pairs]
    lengths = [len(s) for s in sources]
    print(f"{spec.name} ({weights}): {len(sources)} test lines, source tokens min {min(lengths)} / median "
          f"{int(np.median(lengths))} / max {max(lengths)}; batch {args.batch}, {args.threads} threads")
    with tempfile.TemporaryDirectory(prefix="bench-translate-") as tmp:
        shortlist = training_shortlist(args, spec, meta, sp) if args.shortlist else None
        runs = engines(args, spec, model, sp, Path(tmp), shortlist)
        results = measure(args, runs, sources)
        cli = {beam: [cli_seconds(args, Path(tmp) / "onnx", [s for s, _ in pairs], beam) for _ in range(args.rounds)]
               for beam in (1, 4)}
    report(args, runs, results, cli, sp, [t for _, t in pairs], len(sources))


def measure(args, runs: dict, sources) -> dict:
    """(beam, name) -> (median seconds, outputs), rounds interleaved and rotated across engines."""
    times, outputs, order = {}, {}, list(runs)
    for beam in (1, 4):
        for name in runs:  # warm-up, and the outputs scored
            outputs[beam, name] = runs[name](sources[:64], beam)
    cpu, wall = cpu_seconds(), time.perf_counter()
    for r in range(args.rounds):
        for beam in (1, 4):
            for name in order[r % len(order):] + order[:r % len(order)]:
                start = time.perf_counter()
                outputs[beam, name] = runs[name](sources, beam)
                times.setdefault((beam, name), []).append(time.perf_counter() - start)
    (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
    print(f"timed {wall / 60:.1f} min; meanwhile other processes used {max(busy - mine, 0) / wall:.2f} and the "
          f"hypervisor stole {steal / wall:.2f} cores")
    return {k: (statistics.median(t), outputs[k]) for k, t in times.items()}


def report(args, runs, results, cli, sp, references, n: int) -> None:
    print("| search | precision | tfspec ORT (lines/s) | CTranslate2 (lines/s) | tfspec / CTranslate2 | "
          "tfspec tok/s | CTranslate2 tok/s | BLEU tfspec | BLEU CTranslate2 | identical outputs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bleu = lambda out: sacrebleu.corpus_bleu([sp.decode(o) for o in out], [references]).score
    for beam in (1, 4):
        for suffix in ("", " int8") if args.int8 else ("",):
            (t_ours, ours), (t_ct2, ct2) = results[beam, "tfspec ORT" + suffix], results[beam, "CTranslate2" + suffix]
            same = sum(a == b for a, b in zip(ours, ct2))
            print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {'int8' if suffix else 'fp32'} | {n / t_ours:.1f} | "
                  f"{n / t_ct2:.1f} | {t_ct2 / t_ours:.2f} | {sum(map(len, ours)) / t_ours:.0f} | "
                  f"{sum(map(len, ct2)) / t_ct2:.0f} | {bleu(ours):.2f} | {bleu(ct2):.2f} | {same}/{n} |")
    shortlisted = any("shortlist" in name for name in runs)
    if shortlisted:
        print("\n| search | precision | full vocabulary (lines/s) | shortlist (lines/s) | shortlist / full | BLEU full "
              "| BLEU shortlist | identical outputs | candidates per batch (mean) |\n" + "|---" * 9 + "|")
    for beam in (1, 4) if shortlisted else ():
        for suffix in ("", " int8") if args.int8 else ("",):
            (t_full, full), (t_short, short) = (results[beam, f"tfspec ORT{kind}{suffix}"]
                                                for kind in ("", " shortlist"))
            sizes = runs["tfspec ORT shortlist" + suffix].decoder.sizes
            print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {'int8' if suffix else 'fp32'} | "
                  f"{n / t_full:.1f} | {n / t_short:.1f} | {t_full / t_short:.2f} | {bleu(full):.2f} | "
                  f"{bleu(short):.2f} | {sum(a == b for a, b in zip(full, short))}/{n} | "
                  f"{statistics.mean(sizes):.0f} |")
    for beam, seconds in cli.items():
        t = statistics.median(seconds)
        print(f"`tfspec translate --beam {beam}` (fp32), whole command: {t:.1f} s, {n / t:.1f} lines/s")


if __name__ == "__main__":
    main()
