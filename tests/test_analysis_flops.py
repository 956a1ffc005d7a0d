"""Analytic FLOPs against outside references: torch's FLOP counter on the emitted module,
nanoGPT's 6N + 12LHQT rule, hand counts, and the paper's own Table 2 arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tfspec import build_graph, load_spec
from tfspec.analysis.cost import training_cost
from tfspec.analysis.flops import SYMBOLS, analyze_flops, at
from tfspec.backends.torch import build_module
from tfspec.errors import TfspecError
from tfspec.layers import SUBLAYERS
from tfspec.spec import Spec
from tests.conftest import SHIPPED
from tests.test_layers import EXAMPLES, model_for

pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration")  # torch.backends.mkldnn.flags() notes it


def small_copy(spec: Spec) -> Spec:
    """The same layers and head counts at 1/8 of the widths (at least d_model 64), vocabulary 1000."""
    f = max(1, spec.d_model // 64)
    vocab = {"size": 1000} if spec.image is None else spec.vocab.model_dump() | {"size": 1000}  # ids above intensities
    data = spec.model_dump() | {"d_model": spec.d_model // f, "d_ff": spec.d_ff // f, "d_k": max(1, spec.d_k // f),
                                "d_v": max(1, spec.d_v // f), "vocab": vocab}
    return Spec.model_validate(data)


def counted(spec: Spec, n: int, batch: int = 2) -> int:
    """Total FLOPs torch's counter sees in one forward pass of the emitted module."""
    torch.manual_seed(0)
    model = build_module(spec).eval()
    sizes = {"encoder": spec.vocab.size, "decoder": spec.vocab.tgt_size}
    tokens = [torch.randint(4, sizes[stack], (batch, n)) for stack, _ in spec.stacks]
    # The counter has no formula for CPU's fused attention or oneDNN's LSTM: use the math
    # kernel (explicit bmm) and ATen's LSTM, which it counts.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), torch.backends.mkldnn.flags(enabled=False):
        with FlopCounterMode(display=False) as counter:
            model(*tokens)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_matches_torch_flop_counter(name):
    spec = small_copy(load_spec(name))
    n = 12
    analytic = analyze_flops(build_graph(spec), n).forward
    assert counted(spec, n) == pytest.approx(2 * analytic, rel=0.01)


def test_base_at_full_size_matches_torch_flop_counter():
    spec = load_spec("base")
    assert counted(spec, 8, batch=1) == pytest.approx(analyze_flops(build_graph(spec), 8).forward, rel=0.01)


SCANNED_IN_CHUNKS = {"mamba2", "gated_deltanet"}
"""Kinds whose PyTorch lowering computes a recurrence in its quadratic chunk form (Mamba-2's
state space duality, 128 positions at a time; the gated delta rule's triangular solves, 64), which torch's counter counts, while the analysis
counts the recurrence's linear work, as Table 1's row and the decoding step do."""


@pytest.mark.parametrize("layer", [ex for kind, examples in EXAMPLES.items() for ex in examples
                                   if kind not in SCANNED_IN_CHUNKS], ids=str)
def test_every_layer_kind_matches_torch_flop_counter(layer, tmp_path):
    spec = model_for(layer, tmp_path)[1]  # two layers of [layer, ffn], d_model 16, in a fitting stack
    assert counted(spec, 9) == pytest.approx(2 * analyze_flops(build_graph(spec), 9).forward, rel=0.01)


GPT2_SMALL = """
    name: gpt2-small-shaped
    family: decoder-only
    vocab: 50257
    d_model: 768
    heads: 12
    d_ff: 3072
    norm: pre
    activation: gelu
    positional: {kind: sinusoidal, max_len: 1024}
    tie_embeddings: output
    decoder: {layers: 12, block: [causal_self_attention, ffn]}
"""


@pytest.mark.parametrize("context", [256, 1024])
def test_decoder_only_matches_nanogpt_rule(write_spec, context):
    """nanoGPT's estimate_mfu: 6N + 12*L*H*Q*T training FLOPs per token (PaLM, appendix B)."""
    spec = load_spec(write_spec(GPT2_SMALL))
    graph = build_graph(spec)
    L, H, Q = 12, spec.heads, spec.d_model // spec.heads
    rule = 6 * graph.num_params + 12 * L * H * Q * context
    assert 3 * analyze_flops(graph, context).per_token == pytest.approx(rule, rel=0.01)


def test_one_attention_layer_by_hand(write_spec):
    spec = load_spec(write_spec("""
        family: encoder-only
        vocab: 10
        d_model: 4
        heads: 2
        encoder: {layers: 1, block: [self_attention]}
    """))
    # n = 3, d = 4, h = 2, d_k = d_v = 2: QKV 3*4*12 = 144 MACs, scores 2*3*3*2 = 36, values 36,
    # W^O 3*4*4 = 48, projection 3*4*10 = 120: 384 multiply-adds.
    assert analyze_flops(build_graph(spec), 3).forward == 2 * 384


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 2, 5, 9, 30])
def test_visible_pairs_count_the_mask(causal, n):
    layer = SUBLAYERS["restricted_self_attention"](r=4, causal=causal)
    i = np.arange(n)
    assert at(layer.pairs(SYMBOLS), n, {SYMBOLS.r: 4}) == layer.visible(i[:, None], i[None, :]).sum()
    causal_attention = SUBLAYERS["causal_self_attention"]()
    assert at(causal_attention.pairs(SYMBOLS), n, {}) == np.tril(np.ones((n, n))).sum()


def test_table2_costs_are_the_papers_arithmetic():
    """Table 2's footnote: training time x GPUs x sustained TFLOPS (P100: 9.5); 12 h and 3.5 days on 8 GPUs (§5.2)."""
    from tfspec.paper import TABLE2

    assert TABLE2["base"].flops == 3.3e18 and TABLE2["big"].flops == 2.3e19
    for row in TABLE2.values():
        assert row.recomputed == pytest.approx(row.flops, rel=0.02)


def test_training_cost_of_base_is_below_the_papers_hardware_estimate():
    report = analyze_flops(build_graph(load_spec("base")), 25)
    cost = training_cost(report, 100_000, 25_000, "base")
    # 25000 target (+ 25000 source) tokens per step = 1000 pairs of 25-token sequences.
    assert cost.total == pytest.approx(3 * report.forward * 1000 * 100_000)
    assert 0.1 < cost.utilisation < 1
    assert training_cost(report, 1000, 25_000, "base").utilisation is None  # a different run: no ratio


def test_layer_kind_without_formula_is_a_clear_error(monkeypatch):
    graph = build_graph(load_spec("tiny"))
    def no_formula(self, s, dense=False):
        raise NotImplementedError

    monkeypatch.setattr(SUBLAYERS["ffn"], "flops", no_formula)
    with pytest.raises(TfspecError, match="states no FLOP formula"):
        analyze_flops(graph, 4)
