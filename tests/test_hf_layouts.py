"""Every checkpoint tensor layout (``tfspec/interop/hf/layouts.py`` and the families' own
subclasses) is a pair of conversions that must undo each other: export (``to_hf``, tensors
several rules write joined by ``join``, as ``export_checkpoint`` does) writes stored tensors of
exactly the shapes import checks (``hf_shapes``), and import (``to_ir``) reads back the IR
tensors it started from. The families' tests against transformers say which way is right; this
says the two ways agree, for every layout there is: one without a case here fails by name."""

from __future__ import annotations

import numpy as np
import pytest

import tfspec.interop.hf  # noqa: F401  (imports every family module, and so their layouts)
from tfspec.interop.hf.beit import BatchedVector
from tfspec.interop.hf.codegen import ModelParallelQkv
from tfspec.interop.hf.cohere import InterleavedGains, InterleavedRotary
from tfspec.interop.hf.deepseek_v2 import RotaryPairs
from tfspec.interop.hf.family import Rule
from tfspec.interop.hf.layouts import (Concat, Interleave, Layout, PerGroup, PerHead, PlusOne, Row, Split,
                                       Stack, Transpose)
from tfspec.interop.hf.llama4 import ExpertColumns, PairedQKV
from tfspec.interop.hf.qwen3_next import GatedQuery
from tfspec.interop.hf.clip import Vector
from tfspec.interop.hf.siglip import Probe, Scalar
from tfspec.interop.hf.vit import BatchedRows
from tfspec.interop.hf.wavlm import PerHeadScalar

QKV = ("q", "k", "v")
CASES = {
    "copy": [(Rule("w", ("a",)), (4, 3))],
    "transpose": [(Rule("w", ("a",), Transpose()), (4, 3))],
    "transpose-experts": [(Rule("w", ("a",), Transpose()), (2, 4, 3))],
    "row": [(Rule("b", ("a",), Row()), (5,))],
    "plus-one": [(Rule("g", ("a",), PlusOne()), (5,))],
    "concat": [(Rule("w", QKV, Concat()), (6, 3))],
    "concat-grouped": [(Rule("w", QKV, Concat((4, 2, 2))), (8, 3))],
    "split": [(Rule("w1", ("a",), Split((4, 2), 0)), (4, 3)), (Rule("w3", ("a",), Split((4, 2), 1)), (2, 3))],
    "split-columns": [(Rule("w1", ("a",), Split((2, 3), 0, axis=-1)), (4, 2)),
                      (Rule("w3", ("a",), Split((2, 3), 1, axis=-1)), (4, 3))],
    "stack": [(Rule("w", ("e0", "e1", "e2"), Stack()), (3, 4, 2))],
    "interleave": [(Rule("w1", ("a",), Interleave(0)), (2, 4, 3)), (Rule("w3", ("a",), Interleave(1)), (2, 4, 3))],
    "interleave-bias": [(Rule("b1", ("a",), Interleave(0)), (2, 4)), (Rule("b3", ("a",), Interleave(1)), (2, 4))],
    "per-head": [(Rule("w", ("a",), PerHead(2)), (3 * 2 * 4, 5)), (Rule("b", ("c",), PerHead(2)), (3 * 2 * 4,))],
    "per-group": [(Rule("w", ("a",), PerGroup(4, 2)), ((4 + 2 * 2) * 3, 5))],
    # The families' own.
    "cohere-rotary": [(Rule("w", QKV, InterleavedRotary((8, 4, 4), width=4, rotary=2, rotated=12)), (16, 3))],
    "cohere-gains": [(Rule("g", ("a",), InterleavedGains(width=4, rotary=2, rotated=4)), (2, 4))],
    "codegen-qkv": [(Rule("w", ("a",), ModelParallelQkv(width=4, rotary=2, rotated=16)), (24, 3))],
    "deepseek-pairs": [(Rule("w", ("a",), RotaryPairs(6, 2)), (12, 3))],
    "llama4-experts": [(Rule("w1", ("a",), ExpertColumns((3, 3), 0)), (2, 3, 5)),
                       (Rule("w3", ("a",), ExpertColumns((3, 3), 1)), (2, 3, 5)),
                       (Rule("w2", ("c",), ExpertColumns()), (2, 5, 3))],
    "llama4-qkv": [(Rule("w", QKV, PairedQKV((8, 4, 4), block=4)), (16, 3))],
    "clip-vector": [(Rule("c", ("a",), Vector()), (1, 5))],
    "siglip-scalar": [(Rule("s", ("a",), Scalar()), ())],
    "siglip-probe": [(Rule("p", ("a",), Probe()), (5,))],
    "beit-batched-vector": [(Rule("m", ("a",), BatchedVector()), (5,))],
    "wavlm-per-head-scalar": [(Rule("g", ("a",), PerHeadScalar()), (4,))],
    "vit-batched-rows": [(Rule("t", ("cls", "dist", "pos"), BatchedRows((1, 1, 4))), (6, 5))],
    "qwen3-next-gated": [(Rule("w", QKV, GatedQuery(2, (4, 2, 2))), (8, 3)),
                         (Rule("gate", ("q",), GatedQuery(2, part=1)), (4, 3))],
}
"""Rules whose stored tensors go together (a name two rules share is one stored tensor), each
with its IR shape."""


@pytest.mark.parametrize("case", CASES)
def test_export_then_import_gives_the_ir_tensors_back(case):
    rng = np.random.default_rng(0)
    rules = CASES[case]
    weights = {rule.ir: rng.integers(-8, 8, shape).astype(np.float32) for rule, shape in rules}  # exact under +-1
    stored: dict[str, np.ndarray] = {}
    for rule, _ in rules:
        for name, value in rule.to_hf(weights[rule.ir]).items():
            stored[name] = rule.layout.join(stored[name], value) if name in stored else value
    for rule, shape in rules:
        assert {name: stored[name].shape for name in rule.hf} == rule.hf_shapes(shape)
        np.testing.assert_array_equal(rule.to_ir([stored[name] for name in rule.hf]), weights[rule.ir])


def test_every_layout_has_a_case():
    def below(cls):
        return {cls} | {c for sub in cls.__subclasses__() for c in below(sub)}

    tested = {type(rule.layout) for rules in CASES.values() for rule, _ in rules}
    assert below(Layout) - {Layout} - tested == set(), "a layout without a case in CASES"
