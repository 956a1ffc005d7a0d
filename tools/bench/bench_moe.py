"""Mixture-of-experts in ONNX: the emitted graph (each expert runs on the rows routed to it)
against the formulation that runs every expert on every row and weights the outputs by the
router's (mostly zero) probabilities, on the same Mixtral-shaped model and weights.

Both exports come from one spec and one set of random weights; the dense one swaps in the
lowering written below (the baseline, kept here, not in tfspec). Decoding steps (one new token
per row after ``--past`` cached positions) and a prompt pass (``--prompt`` tokens, the ``model``
graph) are timed; each export runs in a fresh process of its own every round (tools/bench/isolated.py:
two sessions in one process share its cores), the two alternating which goes first; medians and
their ratios are printed.

    python tools/bench/bench_moe.py                     # d_model 512, 8 experts of 1792, top 2, 4 layers
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
from isolated import Job, interleave  # noqa: E402
from peer_bare import timed  # noqa: E402

from tfspec.backends.onnx import export  # noqa: E402
from tfspec.backends.onnx import lower  # noqa: E402
from tfspec.backends.onnx.lower.moe import _ffn, route  # noqa: E402
from tfspec.spec import Spec  # noqa: E402

CELLS = [("decoder", 1), ("decoder", 8), ("decoder", 32), ("model", 1)]  # (graph, batch): steps, then a prompt


def dense(e, node, x):
    """Every expert on every row, (E, N, d), summed with the router's weights scattered into (N, E)."""
    b, a, p = e.b, node.attrs, node.params
    d = b.weights[p["w_router"]].shape[1]
    flat = b.rows(x, d)
    top, chosen = route(b, a, flat, p["w_router"])
    zeros = b.op("Mul", b.linear(flat, p["w_router"]), b.const(0.0))  # (N, E)
    weights = b.op("ScatterElements", zeros, chosen, top, axis=1)
    every = [_ffn(b, a, flat, *(b.const(b.weights[p[r]][i]) if r in p else None for r in ("w_1", "w_3", "w_2")))
             for i in range(a["experts"])]
    stacked = b.op("Concat", *[b.op("Unsqueeze", y, b.ints(0)) for y in every], axis=0)  # (E, N, d)
    y = b.op("ReduceSum", b.op("Mul", stacked, b.op("Unsqueeze", b.op("Transpose", weights, perm=[1, 0]),
                                                    b.ints(2))), b.ints(0), keepdims=0)
    b.flat.add(y)
    return y if x in b.flat else b.sequence(y, d)


def spec(args) -> Spec:
    return Spec.model_validate({
        "name": "mixtral-shaped", "family": "decoder-only", "vocab": 8000, "d_model": args.d_model, "heads": 8,
        "kv_heads": 2, "d_ff": args.d_ff, "gated": True, "activation": "silu", "bias": False, "norm": "pre",
        "norm_type": "rms", "dropout": 0.0, "positional": {"kind": "rotary", "max_len": 4096},
        "decoder": {"layers": args.layers, "block": ["causal_self_attention",
                                                     {"kind": "moe", "experts": args.experts, "top_k": args.top_k}]}})


def times(threads: int, directory: str, past: int, prompt: int) -> list[float]:
    """In a worker: ms per call of each cell's graph (10 steps or 2 prompt passes, after one of
    each as warm-up), with the session options `tfspec translate` runs with."""
    import onnxruntime as ort

    from bench_step import feeds
    from tfspec.backends.onnx.runtime import session_options

    calls, sessions = [], {g: ort.InferenceSession(str(Path(directory) / f"{g}.onnx"), session_options(threads))
                           for g in ("decoder", "model")}
    for graph, batch in CELLS:
        session = sessions[graph]
        if graph == "decoder":
            calls.append(lambda s=session, i=feeds(session, batch, past): s.run(["top_ids"], i))
        else:
            tgt = np.random.default_rng(0).integers(4, 8000, (1, prompt))
            mask = {"attention_mask": np.ones_like(tgt)} if "attention_mask" in {i.name for i in session.get_inputs()} \
                else {}  # the model graph of a decoder-only spec now takes one
            calls.append(lambda s=session, t={"tgt": tgt, **mask}: s.run(["logits"], t))
    repeats = [10 if graph == "decoder" else 2 for graph, _ in CELLS]
    seconds = timed([lambda c=c, r=r: [c() for _ in range(r)] for c, r in zip(calls, repeats)], calls)
    return [1e3 * t / r for t, r in zip(seconds, repeats)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=1792)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--past", type=int, default=32)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    from tfspec.backends.torch import build_module

    model = build_module(spec(args)).eval()
    directories = [Path(tempfile.mkdtemp(prefix=f"moe-{kind}-")) for kind in ("routed", "dense")]
    export(model, directories[0], parity=False)
    routed, lower.LOWERINGS["moe"] = lower.LOWERINGS["moe"], lower.Lowering(dense)
    try:
        export(model, directories[1], parity=False)
    finally:
        lower.LOWERINGS["moe"] = routed
    print(f"{model.graph.num_params:,} parameters; {args.experts} experts of {args.d_ff}, top {args.top_k}, "
          f"{args.layers} layers, d_model {args.d_model}; {args.threads} threads; each export in a fresh process "
          f"of its own every round; {cpu_name()}")
    jobs = {kind: Job("bench_moe", "times", ("onnxruntime",), {"directory": str(d), "past": args.past,
                                                                "prompt": args.prompt})
            for kind, d in zip(("routed", "dense"), directories)}
    results = interleave(jobs, args.rounds, args.threads)
    print("ms, median of rounds   routed experts   every expert   every/routed")
    labels = ["step, batch 1", "step, batch 8", "step, batch 32", f"prompt of {args.prompt}"]
    for i, label in enumerate(labels):
        ours, theirs = (statistics.median(r[i] for r in results[kind]) for kind in ("routed", "dense"))
        print(f"{label:22s} {ours:15.3f} {theirs:14.3f} {theirs / ours:13.2f}x")


if __name__ == "__main__":
    main()
