"""CTC (frames in, labels out) against independent references: the loss and the decoders
against sums over every alignment enumerated by brute force, the character error rate against
a recursive edit distance, the frame projection's FLOPs against torch's counter, and the ONNX
export against the PyTorch backend."""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tfspec import build_graph
from tfspec.analysis import analyze_params
from tfspec.analysis.flops import analyze_flops
from tfspec.backends.torch import build_module
from tfspec.backends.torch.training.ctc import ctc_loss, log_probs_of, make_batch
from tfspec.ctc import character_error_rate, edit_distance, greedy, prefix_beam_search
from tfspec.data.digits import Line
from tfspec.spec import Spec

TINY = {"name": "ctc-tiny", "family": "encoder-only", "frames": {"features": 3}, "vocab": 4,
        "head": {"kind": "ctc", "alphabet": "012", "blank": 0}, "d_model": 16, "heads": 2, "d_ff": 32,
        "dropout": 0.0, "norm": "pre", "positional": {"kind": "sinusoidal", "max_len": 64},
        "encoder": {"layers": 2, "block": ["self_attention", "ffn"]}}


def tiny(**changes) -> Spec:
    return Spec.model_validate(TINY | changes)


def collapse(path, blank):
    """The many-to-one map B of Graves et al. 2006 §3.1: merge repeats, then drop blanks."""
    merged = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
    return tuple(k for k in merged if k != blank)


def labelling_probabilities(log_probs: np.ndarray, blank: int) -> dict[tuple, float]:
    """p(labelling) = sum over every path that collapses to it of the product of its frames' probabilities."""
    probs, totals = np.exp(log_probs), {}
    for path in itertools.product(range(probs.shape[1]), repeat=len(probs)):
        p = float(np.prod(probs[np.arange(len(probs)), path]))
        totals[collapse(path, blank)] = totals.get(collapse(path, blank), 0.0) + p
    return totals


def random_lines(rng, lengths, texts) -> list[Line]:
    return [Line(rng.standard_normal((n, 3)).astype(np.float32), text, np.full(n, -1, dtype=np.int8))
            for n, text in zip(lengths, texts)]


@pytest.mark.parametrize("blank", [0, 3])
def test_ctc_loss_is_torch_ctc_loss_and_the_sum_over_alignments(blank):
    spec = tiny(head={"kind": "ctc", "alphabet": "012", "blank": blank})
    torch.manual_seed(0)
    model = build_module(spec).eval()
    lines = random_lines(np.random.default_rng(1), [6, 4], ["01", "22"])
    batch = make_batch(lines, spec.head.symbols)
    ours = ctc_loss(model, batch, blank)
    log_probs = log_probs_of(model, batch)
    reference = F.ctc_loss(log_probs.transpose(0, 1), batch["targets"], batch["lengths"], batch["target_lengths"],
                           blank=blank, reduction="sum")
    assert ours.item() == pytest.approx(reference.item(), rel=1e-6)
    brute = 0.0
    for row, line in enumerate(lines):
        target = tuple(spec.head.symbols.index(c) for c in line.text)
        brute -= np.log(labelling_probabilities(log_probs[row, :len(line.frames)].detach().double().numpy(),
                                                blank)[target])
    assert ours.item() == pytest.approx(brute, rel=1e-5)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("blank", [0, 2])
def test_prefix_beam_search_finds_the_most_probable_labelling(seed, blank):
    rng = np.random.default_rng(seed)
    log_probs = np.log(rng.dirichlet(np.full(3, 0.7), size=6))
    totals = labelling_probabilities(log_probs, blank)
    best = max(totals, key=totals.get)
    assert tuple(prefix_beam_search(log_probs, beam=len(totals), blank=blank)) == best
    best_path = max(itertools.product(range(3), repeat=6),
                    key=lambda path: log_probs[np.arange(6), path].sum())
    assert tuple(greedy(log_probs, blank)) == collapse(best_path, blank)


def test_prefix_beam_search_beats_best_path_where_paths_split_the_mass():
    """Three paths give 'a' (a-a, a-blank, blank-a: 0.6975) and outweigh the best path, blank-blank."""
    p = np.array([[0.55, 0.45], [0.55, 0.45]])  # best path: blank blank (0.3025); 'a': 0.6975
    assert greedy(np.log(p)) == [] and prefix_beam_search(np.log(p), beam=2) == [1]


@lru_cache(maxsize=None)
def levenshtein(a: str, b: str) -> int:
    """The recursive definition, independent of the dynamic programme under test."""
    if not a or not b:
        return len(a) + len(b)
    return min(levenshtein(a[1:], b) + 1, levenshtein(a, b[1:]) + 1, levenshtein(a[1:], b[1:]) + (a[0] != b[0]))


def test_character_error_rate_uses_the_edit_distance():
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("0123"), rng.integers(0, 8))) for _ in range(40)]
    for a, b in zip(words[::2], words[1::2]):
        assert edit_distance(a, b) == levenshtein(a, b)
    assert edit_distance("kitten", "sitting") == 3
    hyps, refs = words[::2], [w or "0" for w in words[1::2]]
    assert character_error_rate(hyps, refs) == sum(map(levenshtein, hyps, refs)) / sum(map(len, refs))


def test_report_counts_the_frame_projection():
    spec = tiny()
    graph = build_graph(spec)
    assert analyze_params(graph).sections["embeddings"]["embedding"] == 3 * 16 + 16
    row = next(r for r in analyze_flops(graph, 10).layers if r.label == "frame_projection")
    assert row.forward == 2 * 10 * 3 * 16
    model = build_module(spec).eval()
    frames, lengths = torch.randn(2, 10, 3), torch.tensor([10, 10])
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model.run({"frames": frames, "lengths": lengths}, ("log_probs",))
    assert counter.get_total_flops() == pytest.approx(2 * analyze_flops(graph, 10).forward, rel=0.01)


def test_padding_frames_change_nothing_at_real_frames():
    model = build_module(tiny()).eval()
    frames = torch.randn(1, 7, 3)
    padded = torch.cat([frames, torch.randn(1, 4, 3)], 1)
    with torch.no_grad():
        short = model.run({"frames": frames, "lengths": torch.tensor([7])}, ("log_probs",))["log_probs"]
        long = model.run({"frames": padded, "lengths": torch.tensor([7])}, ("log_probs",))["log_probs"]
    assert torch.allclose(short, long[:, :7], atol=1e-5)


def test_onnx_frame_log_probs_equal_pytorch(tmp_path):
    pytest.importorskip("onnxruntime")
    from tfspec.backends.onnx import OnnxModel, export

    torch.manual_seed(0)
    model = build_module(tiny()).eval()
    result = export(model, tmp_path / "onnx")
    assert result.ok and len(result.checks) == 2, [str(c) for c in result.checks]
    frames, lengths = np.random.default_rng(2).standard_normal((2, 13, 3)).astype(np.float32), np.array([13, 8])
    ours = OnnxModel(tmp_path / "onnx", device="cpu").run("model", ["log_probs"], {"frames": frames,
                                                                                     "lengths": lengths})[0]
    with torch.no_grad():
        ref = model.run({"frames": torch.from_numpy(frames), "lengths": torch.from_numpy(lengths)},
                        ("log_probs",))["log_probs"].numpy()
    assert np.abs(ours - ref)[0].max() < 1e-4 and np.abs(ours - ref)[1, :8].max() < 1e-4


@pytest.mark.parametrize("changes,needle", [
    ({"vocab": 5}, "vocab.size (5) must be the labels plus the blank: 3 + 1 = 4"),
    ({"family": "encoder-decoder", "decoder": {"layers": 1, "block": ["causal_self_attention", "ffn"]}},
      "frames feed an encoder alone"),
    ({"head": None}, "give an output head"),
    ({"head": {"kind": "ctc", "alphabet": "001"}}, "repeats a character"),
    ({"head": {"kind": "ctc", "alphabet": "012", "blank": 7}}, "head.blank (7) must be below vocab.size (4)"),
    ({"head": {"kind": "ctx", "alphabet": "012"}}, "'ctc'"),
])
def test_bad_ctc_specs_say_what_to_fix(changes, needle):
    with pytest.raises(Exception) as info:
        tiny(**changes)
    assert needle in str(info.value)


def test_spec_errors_name_the_field(write_spec, cli):
    import yaml

    path = write_spec(yaml.safe_dump(TINY | {"vocab": 9}))
    code, _, err = cli("validate", path)
    assert code == 2 and "vocab.size (9)" in err and len(err.strip().splitlines()) == 1
