"""What the Node.js client's tests (clients/node/test/) compare with: tiny exports with
generate.onnx (text, ids, decoder-only) and, for each case, what `tfspec translate` prints
for it, recorded in cases.json; Python's own line splitting, stripping and repr, and
sentencepiece's ids and text for the export's tokenizer, in python.json.

``python -m tests.node_fixture DIR`` writes them (``npm test`` does, when no fixture is given);
``tests/test_node_client.py`` writes them once and runs ``node --test`` against them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from tfspec.cli import main
from tfspec.data import sample_dir, train_tokenizer

LINES = 20  # of each side of the sample's test split: 40 lines of text
DECODER_ONLY = """\
name: dec
family: decoder-only
vocab: 1000
d_model: 32
heads: 4
d_ff: 64
norm: pre
positional: {kind: learned, max_len: 256}
decoder: {layers: 1, block: [causal_self_attention, ffn]}
"""


PREVIOUS = Path(__file__).parent / "fixtures" / "before-masks" / "seq2seq-onnx"
"""An export written before encoder graphs took ``attention_mask`` (tests/test_masks_full.py):
the client feeds only the inputs a graph has."""
PREVIOUS_LINES = json.loads((PREVIOUS.parent / "seq2seq-onnx-tokens.json").read_text())["lines"]


def run(*args: str, stdin: str | None = None) -> dict:
    """Exit status, standard output and standard error of ``tfspec ARGS`` (in this process)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:  # argparse's refusals
                code = e.code
    finally:
        sys.stdin = old
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def spread_weights(root: Path) -> Path:
    """The decoder-only model's weights drawn with a wide spread (normal, 0.3): its tokens then
    follow its prompt, where default random weights repeat one token whatever comes before, so a
    batch of prompts padded wrongly prints other lines than each prompt alone."""
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import save_weights
    from tfspec.spec import load_spec

    torch.manual_seed(0)
    model = build_module(load_spec(root / "spec" / "dec.yaml"))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    save_weights(model, root / "dec.safetensors")
    return root / "dec.safetensors"


def exports(root: Path) -> dict[str, Path]:
    """tiny with the sample's tokenizer, tiny reading ids, and a decoder-only model (random weights)."""
    tokenizer = train_tokenizer(sample_dir(), 1000, out_dir=root / "spm")
    (root / "spec").mkdir()  # apart from the tokenizer: export copies the *.model files beside a spec
    (root / "spec" / "dec.yaml").write_text(DECODER_ONLY)
    made = {"text": ("tiny", "--tokenizer", tokenizer), "ids": ("tiny",),
            "dec": (root / "spec" / "dec.yaml", "--tokenizer", tokenizer, "--weights", spread_weights(root))}
    for name, (spec, *more) in made.items():
        result = run("export", spec, "-o", root / name, "--generate", "--seed", "1", "--no-check", *more)
        if result["code"] != 0:
            raise RuntimeError(f"tfspec export {spec} failed:\n{result['stdout']}{result['stderr']}")
    return {name: root / name for name in made}


def cases(dirs: dict[str, Path]) -> list[dict]:
    """Each case: the export, translate's flags, its input, and what `tfspec translate` did."""
    sample = sample_dir()
    text = [line for side in ("en", "de") for line in (sample / f"test.{side}").read_text().splitlines()[:LINES]]
    long = " ".join(text)  # more tokens than tiny's 256 positions: cut, with a warning
    inputs = {
        "text": "\n".join(text[:LINES] + ["", "  \t", long] + text[LINES:]) + "\n",
        "ids": "5 6 7 8\n\n+9 010 1_1\n  12 13\t14  \n" + " ".join(["20"] * 300) + "\n",
        "dec": "\n".join(text[:3] + ["", text[-1]]) + "\n",
    }
    wanted = [("text", []), ("text", ["--beam", "1"]), ("text", ["--beam", "2", "--alpha", "1.5", "--max-extra", "3"]),
              ("text", ["--max-extra", "0"]), ("ids", []), ("ids", ["--beam", "1", "--batch", "2"]), ("dec", []),
              ("dec", ["--beam", "1"])]
    others = [("ids", [], "5 6\n7 1000\n"), ("ids", [], "5 six\n"), ("ids", [], "-1\n"), ("text", ["--beam", "0"], ""),
              ("text", ["--max-extra", "-1"], ""), ("text", [], "x" * 100_001 + "\n"), ("text", [], "")]  # and no input
    # the pad id (0) as a word inside sources of a batch that pads: the client feeds attention_mask
    others += [("ids", ["--beam", "1", "--max-extra", "6"], "5 0 7 8 0 9\n0 12\n33\n")]
    others += [("old", args, "\n".join(PREVIOUS_LINES) + "\n") for args in (["--max-extra", "8"], ["--beam", "1"])]
    out = [{"dir": d, "args": a, "input": inputs[d]} for d, a in wanted]
    out += [{"dir": d, "args": a, "input": i} for d, a, i in others]
    for case in out:
        case |= run("translate", dirs[case["dir"]], *case["args"], stdin=case["input"])
    return out


def tokenizer_reference(model: Path) -> dict:
    """sentencepiece's ids (and end of sentence) for every line of the sample's test split, and
    its text for random id sequences, some starting with control, unknown or whitespace pieces."""
    import random

    import sentencepiece

    sp, rng = sentencepiece.SentencePieceProcessor(model_file=str(model)), random.Random(0)
    lines = [line for side in ("en", "de") for line in (sample_dir() / f"test.{side}").read_text().splitlines()]
    starts = [0, 1, 2, 3, sp.piece_to_id("\u2581")]
    sequences = [[rng.choice(starts) for _ in range(rng.randint(0, 2))] + [rng.randrange(sp.get_piece_size())
                                                                          for _ in range(rng.randint(1, 8))]
                 for _ in range(500)]
    return {"lines": [[line, sp.encode(line) + [sp.eos_id()]] for line in lines],
            "decode": [[ids, sp.decode(ids)] for ids in sequences]}


def python_reference() -> dict:
    """Python's splitlines (after universal newlines), strip and repr on text that tells them
    apart from JavaScript's: every line break and space Python knows, U+FEFF, quotes, controls."""
    texts = ["a\r\nb\rc\nd\x0be\x0cf\x1cg\x1dh\x1ei\x85j\u2028k\u2029l\n", "", "\n", "a\n\n", "a\n\nb", "\r\n\r\n"]
    words = [" ", "\t\x1f\x1c", "\u3000\xa0\u2007", "\ufeff", "\u200b", "x", " \x85x\u2028 "]
    reprs = ["it's", 'say "hi"', "both ' and \"", "tab\there\n", "\x00\x7f\x85\xa0\u200b\u2028\ufeff", "ä€😀",
             "\\back", "\U000e0001 \U0010ffff"]
    return {"splitlines": [[t, io.StringIO(t, newline=None).read().splitlines()] for t in texts],
            "blank": [[w, not w.strip()] for w in words], "repr": [[r, repr(r)] for r in reprs]}


def write(root: Path) -> Path:
    """Write the exports, cases.json and python.json into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    dirs = exports(root) | {"old": PREVIOUS}
    (root / "cases.json").write_text(json.dumps({"dirs": {k: str(v) for k, v in dirs.items()}, "cases": cases(dirs)},
                                                ensure_ascii=False))
    (root / "python.json").write_text(json.dumps(python_reference() | {"tokenizer": tokenizer_reference(
        dirs["text"] / "tokenizer.model")}, ensure_ascii=False))
    return root


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
