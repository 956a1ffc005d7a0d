"""Translating a real file: tfspec vs CTranslate2 on the same trained weights and the same lines.

Where `tools/bench/bench_decode.py` times fixed shapes, this times what a server does: the first N
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

Each engine and precision runs in a fresh process of its own every round (tools/bench/isolated.py:
the same threads, a warm-up on the first 64 lines at each beam, then one timed pass per
beam), rounds rotate which engine goes first, and "CTranslate2 bare" runs the peer in a process
that imports nothing but it (tools/bench/peer_bare.py): a CTranslate2 column more than 10% below it
marks the table INVALID and the tool exits with status 1.

With ``--shortlist``, tfspec's exports also carry a target-vocabulary shortlist counted over
the run's training pairs (``export --shortlist``), and a second table compares decoding with it
(``translate --shortlist``) against the full vocabulary in the same rounds: lines/s, the ratio,
BLEU of both and the mean number of candidates a batch scores.

    tfspec train small --data DATA --out RUN ...          # any run whose spec CTranslate2 can hold
    python tools/bench/bench_translate.py RUN                    # 500 test lines, greedy and beam 4, fp32 and int8
    python tools/bench/bench_translate.py RUN --shortlist --batch 1 --no-int8   # the shortlist at batch 1
    python tools/bench/bench_translate.py RUN --fused            # the --fused exports (in-place cache)
"""

from __future__ import annotations

import argparse
import json
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

from bandwidth import cpu_name
from bench_decode import cpu_seconds, ct2_maps, ct2_model, vocabulary
from isolated import Job, interleave, with_bare
from peer_bare import BARE_LIMIT, fastest_ct2, invalid, timed
from tfspec.backends.onnx import export
from tfspec.cli.models import run_spec, run_weights
from tfspec.data import read_split
from tfspec.data.codecs import TOKENIZER


TAKES = "~4 minutes of timing (`--rounds 2 --fused` on 500 lines), after the run it reads was trained"
"""How long a run takes (tools/README.md lists it)."""


def prepare(args, spec, model, sp, work: Path, sources: list, shortlist=None) -> dict[str, Job]:
    """Name -> the job timing that engine over ``sources`` (saved as JSON), each run in a
    process of its own (tools/bench/isolated.py); here only the exports and CTranslate2's directory
    are written. "CTranslate2 bare": the peer in a process that imports nothing else."""
    (work / "sources.json").write_text(json.dumps(sources))
    common = {"sources": str(work / "sources.json"), "batch": args.batch, "beams": [1, 4],
              "limit": spec.positional.max_len - 1}
    words = vocabulary(spec)[:4] + [sp.id_to_piece(i) for i in range(4, spec.vocab.size)]
    ct2_model(model, spec, work / "ct2", words)
    jobs = {}
    for suffix, int8 in (("", False), (" int8", True)) if args.int8 else (("", False),):
        directory = work / f"onnx{suffix.strip()}"  # `tfspec translate` (cli_seconds) reads text in "onnx"
        export(model, directory, parity=False, int8=int8, shortlist=shortlist, fused=args.fused)
        shutil.copyfile(args.run / TOKENIZER, directory / TOKENIZER)
        ours = Job("bench_translate", "lines", ("onnxruntime",), common | {"directory": str(directory)})
        jobs["tfspec ORT" + suffix] = ours
        if shortlist:
            jobs["tfspec ORT shortlist" + suffix] = ours.but(kwargs={"shortlist": True})
        peer = Job("peer_bare", "ct2_lines", ("ctranslate2",),
                   common | {"model": str(work / "ct2"), "compute": "int8" if int8 else "float32"})
        env, why = fastest_ct2(peer, args.threads, lambda result: sum(result["seconds"]))
        print(f"CTranslate2 backend, {why}")
        jobs["CTranslate2" + suffix] = peer.but(env=env)
    return with_bare(jobs, ["CTranslate2", "CTranslate2 int8"],
                     lambda peer: peer.replace("CTranslate2", "CTranslate2 bare"))


def lines(threads: int, directory: str, sources: str, batch: int, beams: list, limit: int,
          shortlist: bool = False) -> dict:
    """In a worker: ``peer_bare.ct2_lines`` for tfspec's `decode_all` (what `tfspec translate`
    calls) on onnxruntime, end of sentence left out of the outputs; with ``shortlist``, over the
    shortlist step graph, also giving the candidates each batch scored."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.evaluate import decode_all
    from tfspec.search import SearchOptions

    onnx = OnnxModel(directory, device="cpu", threads=threads)
    dec = Counted(onnx.decoder(shortlist=True)) if shortlist else onnx.decoder()
    eos, rows, outputs = onnx.spec.vocab.eos_id, json.loads(Path(sources).read_text()), {}

    def run(src, beam):
        done = decode_all(dec, src, SearchOptions(beam=beam, alpha=0.6, max_extra=limit, max_length=limit), batch)
        outputs[str(beam)] = [[int(t) for t in (o[:-1] if o[-1:] == [eos] else o)] for o in done]
    seconds = timed([lambda b=b: run(rows, b) for b in beams], [lambda b=b: run(rows[:64], b) for b in beams])
    return {"seconds": seconds, "outputs": outputs, "sizes": getattr(dec, "sizes", [])}


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
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights

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
        jobs = prepare(args, spec, model, sp, Path(tmp), sources, shortlist)
        cpu, wall = cpu_seconds(), time.perf_counter()
        rounds = interleave(jobs, args.rounds, args.threads)
        (busy, steal, mine), wall = cpu_seconds() - cpu, time.perf_counter() - wall
        print(f"timed {wall / 60:.1f} min, each engine in a fresh process of its own every round; meanwhile other "
              f"processes used {max(busy - mine, 0) / wall:.2f} and the hypervisor stole {steal / wall:.2f} cores; "
              f"{cpu_name()}")
        cli = {beam: [cli_seconds(args, Path(tmp) / "onnx", [s for s, _ in pairs], beam) for _ in range(args.rounds)]
               for beam in (1, 4)}
    results = {(beam, name): (statistics.median(r["seconds"][i] for r in runs), runs[-1]["outputs"][str(beam)])
               for name, runs in rounds.items() for i, beam in enumerate((1, 4))}
    sys.exit(report(args, rounds, results, cli, sp, [t for _, t in pairs], len(sources)))


def report(args, runs, results, cli, sp, references, n: int) -> int:
    """Print the tables; 1 (the exit status) when CTranslate2 ran below its bare speed."""
    print("| search | precision | tfspec ORT (lines/s) | CTranslate2 (lines/s) | CTranslate2 bare (lines/s) | "
          "tfspec / CTranslate2 | tfspec tok/s | CTranslate2 tok/s | BLEU tfspec | BLEU CTranslate2 | "
          "identical outputs |")
    print("|---" * 11 + "|")
    invalid_cells = []
    bleu = lambda out: sacrebleu.corpus_bleu([sp.decode(o) for o in out], [references]).score
    for beam in (1, 4):
        for suffix in ("", " int8") if args.int8 else ("",):
            (t_ours, ours), (t_ct2, ct2) = results[beam, "tfspec ORT" + suffix], results[beam, "CTranslate2" + suffix]
            same, t_bare = sum(a == b for a, b in zip(ours, ct2)), results[beam, "CTranslate2 bare" + suffix][0]
            search = 'greedy' if beam == 1 else f'beam {beam}'
            print(f"| {search} | {'int8' if suffix else 'fp32'} | {n / t_ours:.1f} | "
                  f"{n / t_ct2:.1f} | {n / t_bare:.1f} | {t_ct2 / t_ours:.2f} | {sum(map(len, ours)) / t_ours:.0f} | "
                  f"{sum(map(len, ct2)) / t_ct2:.0f} | {bleu(ours):.2f} | {bleu(ct2):.2f} | {same}/{n} |")
            if why := invalid(f"CTranslate2{suffix} ({search})", n / t_ct2, n / t_bare):
                invalid_cells.append(why)
    shortlisted = any("shortlist" in name for name in runs)
    if shortlisted:
        print("\n| search | precision | full vocabulary (lines/s) | shortlist (lines/s) | shortlist / full | BLEU full "
              "| BLEU shortlist | identical outputs | candidates per batch (mean) |\n" + "|---" * 9 + "|")
    for beam in (1, 4) if shortlisted else ():
        for suffix in ("", " int8") if args.int8 else ("",):
            (t_full, full), (t_short, short) = (results[beam, f"tfspec ORT{kind}{suffix}"]
                                                for kind in ("", " shortlist"))
            sizes = [size for r in runs["tfspec ORT shortlist" + suffix] for size in r["sizes"]]
            print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {'int8' if suffix else 'fp32'} | "
                  f"{n / t_full:.1f} | {n / t_short:.1f} | {t_full / t_short:.2f} | {bleu(full):.2f} | "
                  f"{bleu(short):.2f} | {sum(a == b for a, b in zip(full, short))}/{n} | "
                  f"{statistics.mean(sizes):.0f} |")
    for beam, seconds in cli.items():
        t = statistics.median(seconds)
        print(f"`tfspec translate --beam {beam}` (fp32), whole command: {t:.1f} s, {n / t:.1f} lines/s")
    for why in invalid_cells:
        print(why + f" (limit {BARE_LIMIT:.0%}): this table is INVALID, the peer was slowed by its conditions")
    return 1 if invalid_cells else 0


if __name__ == "__main__":
    main()
