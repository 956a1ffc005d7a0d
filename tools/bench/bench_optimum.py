"""tfspec against optimum, the tool most users pick to export a transformers checkpoint to ONNX.

For each family (default llama, qwen2, gpt2, marian, t5, bart), transformers writes a random
checkpoint of one shape (default d_model 512, 8 layers (seq2seq: 8 + 8), vocab 32000; in optimum's
own environment, whose transformers it pins) and both tools start from that directory as a user
would: ``optimum-cli export onnx --task text-generation-with-past`` (seq2seq:
``text2text-generation-with-past``), ``tfspec export DIR`` (its own graphs) and ``tfspec export
DIR --format optimum`` (the layout optimum's loaders read). Each export
runs in a fresh process, timed, with its peak RSS (wait4) and its bytes on disk. Then, each in
a fresh process of its own every round (tools/bench/isolated.py), greedy decoding of 32-token prompts
-> exactly 64 new tokens at batch 1 and 8 (seq2seq: 32-token sources -> 64 target tokens),
float32, the same threads for all:

    tfspec                  tfspec's own search over its own export (``bench_generate.ours``)
    optimum                 ``ORTModelForCausalLM.generate`` (``ORTModelForSeq2SeqLM``) over optimum's export
    optimum on tfspec       the same driver over tfspec's ``--format optimum`` export: the
                            graphs compared under one search
    optimum bare            the optimum column's control (``python -I tools/bench/peer_bare.py``)

Before timing, every engine's tokens are compared with transformers' (8 prompts). A peer column
more than 10% below its bare speed marks the table INVALID (exit 1).

    python tools/bench/bench_optimum.py                              # ~6 minutes on 2 quiet cores
    python tools/bench/bench_optimum.py --families llama --layers 2 --rounds 1   # a smoke run

Needs optimum-onnx in a virtual environment of its own (``--optimum-python``, default
``.venv-optimum/bin/python``: README, "References").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bandwidth import cpu_name  # noqa: E402
from bench_generate import SETTINGS, save_prompts  # noqa: E402
from isolated import Job, conditions, interleave, with_bare  # noqa: E402
from peer_bare import BARE_LIMIT, invalid  # noqa: E402
from results import Table, record, save  # noqa: E402

TAKES = "~7 minutes on 2 quiet cores (the decoder families); `--families marian,t5,bart,llama` ~17 minutes"
"""How long a run takes (tools/README.md lists it)."""
ROOT = Path(__file__).resolve().parents[2]
WRITE = """\
import sys, torch, transformers
family, path, d, layers, vocab = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
grouped = dict(hidden_size=d, intermediate_size=d * 8 // 3, num_hidden_layers=layers, num_attention_heads=d // 64,
               num_key_value_heads=max(d // 256, 1))
seq2seq = dict(d_model=d, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=d // 64,
               decoder_attention_heads=d // 64, encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d, forced_eos_token_id=None)
shape = {"llama": ("LlamaConfig", grouped), "qwen2": ("Qwen2Config", grouped),
         "gpt2": ("GPT2Config", dict(n_embd=d, n_layer=layers, n_head=d // 64)),
         "marian": ("MarianConfig", dict(seq2seq, pad_token_id=0, decoder_start_token_id=0)),
         "bart": ("BartConfig", seq2seq),
         "t5": ("T5Config", dict(d_model=d, d_kv=64, d_ff=4 * d, num_layers=layers, num_heads=d // 64,
                                 decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))}[family]
ids = {} if family in ("t5", "bart", "marian") else dict(bos_token_id=1, eos_token_id=2)
positions = {} if family == "t5" else dict(max_position_embeddings=256)  # T5's are relative
config = getattr(transformers, shape[0])(vocab_size=vocab, **positions, **ids, **shape[1])
torch.manual_seed(0)
auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
model = auto.from_config(config).eval()
model.save_pretrained(path)
print(sum(p.numel() for p in model.parameters()))
"""
SEQ2SEQ = ("marian", "t5", "bart")


def measured(command: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of ``command`` run to completion in a process of its own."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(command)}\n{child.stderr.read().decode()[-3000:]}")
    return seconds, usage.ru_maxrss * 1024


def disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def prepare(args, family: str, work: Path) -> tuple[int, dict, dict[str, Job]]:
    """(parameters, export name -> (seconds, peak RSS, bytes), the decoding jobs)."""
    hf = work / family
    params = int(subprocess.run([args.optimum_python, "-c", WRITE, family, str(hf), str(args.d_model),
                                 str(args.layers), str(args.vocab)], check=True, capture_output=True,
                                text=True).stdout.split()[-1])
    tfspec = str(Path(sys.executable).with_name("tfspec"))
    cli = str(Path(args.optimum_python).with_name("optimum-cli"))
    task = "text2text-generation-with-past" if family in SEQ2SEQ else "text-generation-with-past"
    exports = {"optimum": [cli, "export", "onnx", "--model", str(hf), "--task", task, str(work / f"{family}-optimum")],
               "tfspec": [tfspec, "export", str(hf), "-o", str(work / f"{family}-tfspec"), "--no-check"],
               "tfspec --format optimum": [tfspec, "export", str(hf), "--format", "optimum", "-o",
                                           str(work / f"{family}-hub"), "--no-check"]}
    made = {}
    for name, command in exports.items():
        seconds, rss = measured(command)
        made[name] = (seconds, rss, disk(Path(command[-2] if command[-1] == "--no-check" else command[-1])))
    optimum, seq2seq = ("torch", "onnxruntime", "transformers"), family in SEQ2SEQ
    ours, theirs = ("ours_seq2seq", "seq2seq_generate") if seq2seq else ("ours", "optimum_generate")
    flag = {"optimum": True} if seq2seq else {}
    jobs = {"tfspec": Job("bench_generate", ours, ("onnxruntime",), {"directory": str(work / f"{family}-tfspec")}),
            "optimum": Job("peer_bare", theirs, optimum, {"model": str(work / f"{family}-optimum"), **flag},
                           python=args.optimum_python),
            "optimum on tfspec": Job("peer_bare", theirs, optimum, {"model": str(work / f"{family}-hub"), **flag},
                                     python=args.optimum_python)}
    return params, made, with_bare(jobs, ["optimum"])


def check(args, family: str, work: Path, jobs: dict, prompts: dict) -> str:
    """Greedy tokens of every engine against transformers', each in a process of its own."""
    asked = {"prompts": {}, "n": args.new, "check": prompts["8"]}
    function = "seq2seq_generate" if family in SEQ2SEQ else "hf_generate"
    reference = Job("peer_bare", function, ("torch", "transformers"), {"model": str(work / family)},
                    python=args.optimum_python)
    ref = reference.but(kwargs=asked).run(args.threads)[0]
    total = sum(map(len, ref))
    got = {name: job.but(kwargs=asked).run(args.threads)[0] for name, job in jobs.items() if not name.endswith(" bare")}
    return ", ".join(f"{name} {sum(a == b for r, o in zip(ref, out) for a, b in zip(r, o))}/{total}"
                     for name, out in got.items())


def report(args, family: str, params: int, made: dict, agreement: str, results: dict) -> tuple[list[Table], list[str]]:
    """The family's two tables (printed); the reasons it is invalid."""
    title = (f"### {family}: {params / 1e6:.0f}M parameters (d_model {args.d_model}, {args.layers} layers, vocab "
             f"{args.vocab})\n\ngreedy tokens equal to transformers' (8 prompts x {args.new}): {agreement}")
    exports = Table(["export", "seconds", "peak RSS (MiB)", "on disk (MiB)"], ["", ".1f", ".0f", ".0f"],
                    [[name, seconds, rss / 2**20, size / 2**20] for name, (seconds, rss, size) in made.items()], title)
    names, reasons, rows = list(results), [], []
    for i, batch in enumerate(SETTINGS):
        speed = {n: batch * args.new / statistics.median(r["seconds"][i] for r in results[n]) for n in names}
        rows.append([batch, *(speed[n] for n in names), speed["tfspec"] / speed["optimum"],
                     speed["optimum on tfspec"] / speed["optimum"]])
        if why := invalid(f"optimum (batch {batch})", speed["optimum"], speed["optimum bare"]):
            reasons.append(why)
    peak = {n: max(r["rss"] for r in results[n]) for n in names}
    speeds = Table(["batch", *(f"{n} (tok/s)" for n in names), "tfspec / optimum", "optimum on tfspec / optimum"],
                   ["d", *[".0f"] * len(names), ".2f", ".2f"], rows,
                   notes=["decoding peak RSS (MiB): " + ", ".join(f"{n} {peak[n] / 2**20:.0f}" for n in names)])
    print("\n" + exports.markdown() + "\n\n" + speeds.markdown())
    return [exports, speeds], reasons


def optimum_options(p: argparse.ArgumentParser) -> argparse.Namespace:
    """``--save`` and ``--optimum-python`` added to ``p``, its arguments parsed, and the optimum
    environment required (the comparisons against optimum share them: bench_encoders.py too)."""
    p.add_argument("--save", metavar="NAME", help="also write the tables to tools/results/NAME.json, which "
                   "BENCHMARKS.md shows (`python tools/generators/benchmarks.py`)")
    p.add_argument("--optimum-python", default=str(ROOT / ".venv-optimum" / "bin" / "python"),
                   help="the Python of optimum-onnx's own environment (README)")
    args = p.parse_args()
    if not Path(args.optimum_python).is_file():
        sys.exit(f"error: no optimum environment at {args.optimum_python}: python3 -m venv .venv-optimum && "
                 ".venv-optimum/bin/pip install torch==2.13.0 'optimum-onnx[onnxruntime]==0.1.0' 'transformers<4.58'")
    return args


def finish(args, header: str, tables: list[Table], reasons: list[str]) -> None:
    """Print why the run is invalid, save its record (``--save``), exit 1 when invalid."""
    for why in reasons:
        print(why + f" (limit {BARE_LIMIT:.0%}): this table is INVALID, the peer was slowed by its conditions")
    if args.save:
        notes = [f"{why} (limit {BARE_LIMIT:.0%})" for why in reasons]
        print(f"saved {save(args.save, record(' '.join([header, *notes]), tables))}")
    sys.exit(1 if reasons else 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("vocab", 32000), ("d-model", 512), ("layers", 8), ("prompt", 32), ("new", 64),
                          ("rounds", 3), ("threads", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--families", default="llama,qwen2,gpt2,marian,t5,bart",
                   help="comma-separated: llama, qwen2, gpt2 (decoder-only), marian, t5, bart (seq2seq)")
    args = optimum_options(p)
    header = (f"tfspec against optimum-onnx: {args.threads} threads, prompt {args.prompt} -> exactly {args.new} new "
              f"tokens, greedy, float32, median of {args.rounds} rounds, each engine in a fresh process of its own "
              f"every round; {cpu_name()}; {conditions()}")
    print(header)
    reasons, tables = [], []
    for family in args.families.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench-optimum-{family}-") as tmp:
            work = Path(tmp)
            prompts, _ = save_prompts(work, args.vocab, args.prompt, 8)
            if family in SEQ2SEQ:  # sources: no leading BOS, which is BART's pad id and T5's end
                for path in prompts.values():
                    np.save(path, np.load(path)[:, 1:])
            params, made, jobs = prepare(args, family, work)
            agreement = check(args, family, work, jobs, prompts)
            timing = {name: job.but(kwargs={"prompts": prompts, "n": args.new}) for name, job in jobs.items()}
            results = interleave(timing, args.rounds, args.threads)
            made_tables, why = report(args, family, params, made, agreement, results)
            tables, reasons = tables + made_tables, reasons + why
    finish(args, header, tables, reasons)


if __name__ == "__main__":
    main()
