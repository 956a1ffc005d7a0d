"""Positions computed from the model's own gates (issue 57, part F): forgetting attention, the
``forget_gates`` position kind (Lin et al. 2025; x-transformers' ``attn_data_dependent_alibi``),
and contextual position encoding, the ``contextual`` kind (CoPE, Golovneva et al. 2024;
x-transformers' ``attn_use_cope``).

References: x-transformers 2.31.10 on the same weights (``tests/xtransformers_reference.py``) in
PyTorch, KV-cached decoding and onnxruntime; the papers' equations written out in numpy over
tfspec's weights; parameter and FLOP counts against x-transformers' own and torch's FLOP counter;
the training-memory estimate against autograd's saved tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests import xtransformers_reference as ref
from tests.test_train_memory_ops import LENGTH, ROWS, measured
from tests.test_variants_positions import written_out
from tests.xtransformers_reference import DIM_HEAD, HEADS, MAX_LEN, Case, check_cached, check_onnx, check_torch
from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.complexity import table1_complexity
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.analysis.params import analyze_params
from tfspec.backends.torch import build_module
from tfspec.layers.attention import fused_kernel


def attention_blocks(xt):
    return [layer.block for layer in ref.xt_layers(xt) if layer.type == "a"]


def counts_match(case: Case, n: int = 9) -> None:
    """Parameters as x-transformers counts them; forward FLOPs as torch's counter sees x-transformers
    compute one sequence of ``n`` (math kernel)."""
    torch.manual_seed(0)
    xt, graph = ref.xt_model(case), build_graph(ref.spec(case))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        xt(ref.tokens(1, n))
    assert analyze_flops(graph, n).forward == counter.get_total_flops()


def cache_table1_kernels(case: Case, per_key: int) -> None:
    """Table 1's class unchanged, the scores spelled out, the KV cache plain attention's plus
    ``per_key`` values per cached key and layer."""
    graph, plain = build_graph(ref.spec(case)), build_graph(ref.spec(Case()))
    n, layers = 9, ref.DEPTH
    assert analyze_kv_cache(graph, n).at_n == analyze_kv_cache(plain, n).at_n + layers * n * per_key
    for node in (x for x in graph.nodes() if x.op == "attention"):
        assert not fused_kernel(node)
        assert table1_complexity(node.layer) == "O(n²·d)"


def memory_matches(positional: dict) -> None:
    """What the kind adds to each attention's declared training bytes (``#positions``) is what it
    adds to autograd's saved tensors beside ALiBi's spelled-out attention (no saved bias)."""
    sizes, kept = {"B": ROWS, "S": LENGTH, "T": LENGTH}, {}
    for p in (positional, {"kind": "alibi"}):
        graph = build_graph(ref.spec(Case(spec={"positional": p | {"max_len": 2 * LENGTH}})))
        got = measured(build_module(graph).train(), graph)
        kept[p["kind"]] = [(got[x.name], train_memory._saved(graph, x, sizes).get(f"{x.name}#positions", 0))
                           for x in graph.nodes() if x.op == "attention"]
    for (got, declared), (alibi_got, _) in zip(kept[positional["kind"]], kept["alibi"]):
        assert declared > 0 and got - alibi_got == declared


def randomised_tf(case: Case, seed: int = 3):
    """tfspec's model of ``case`` with every parameter drawn from N(0, 0.4)."""
    _, tf = ref.pair(case)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in tf.parameters():
            p.normal_(0.0, 0.4)
    return tf


def dot(q, k):
    return q @ k.transpose(0, 2, 1)


# --- forgetting attention: the forget_gates position kind ---------------------------------------


def copy_forget_gates(a, copier, prefix):
    linear = a.data_dependent_alibi.to_forget_gates[0]
    copier.set(f"{prefix}.w_forget", linear.weight)
    copier.set(f"{prefix}.b_forget", linear.bias)


def spread_gate_bias(xt):
    """Gate biases off x-transformers' start of 5 (gates near 1), so that the gates forget."""
    for block in attention_blocks(xt):
        block.data_dependent_alibi.to_forget_gates[0].bias.normal_(0.0, 1.0)


def forgetting() -> Case:
    return Case({"attn_data_dependent_alibi": True}, spec={"positional": {"kind": "forget_gates", "max_len": MAX_LEN}},
                hooks=(ref.attention_hook(copy_forget_gates),), init=(spread_gate_bias,))


def test_forget_gates_match_x_transformers_in_pytorch_and_cached_steps():
    check_torch(forgetting())
    check_cached(forgetting())


def test_forget_gates_match_x_transformers_in_onnx(tmp_path):
    check_onnx(forgetting(), tmp_path)


def test_forget_gates_change_the_logits():
    ref.differs(forgetting())


def test_forget_gates_are_the_papers_decay():
    """Lin et al. 2025, eq. 4-6: f_t = sigmoid(w_f x_t + b_f) per head, logits plus
    D_ij = sum_{l=j+1..i} log f_l, summed here pair by pair (not as differences of cumulative sums)."""
    tf = randomised_tf(forgetting())
    ids = ref.tokens()

    def bias(p, a, x):
        xn = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * p[f"{a}_norm.weight"]
        log_f = -np.log1p(np.exp(-(xn @ p[f"{a}.w_forget"].T + p[f"{a}.b_forget"])))  # (n, h)
        n = len(x)
        out = np.zeros((HEADS, n, n))
        for i in range(n):
            for j in range(i + 1):
                out[:, i, j] = log_f[j + 1:i + 1].sum(0)
        return out

    want = written_out(tf, ids, dot, bias)
    np.testing.assert_allclose(ref.logits_tf(tf, ids), want, atol=ref.TOLERANCE, rtol=0)


def test_forget_gates_parameters_flops_cache_and_kernels():
    """Per layer an (h, d) gate projection with bias, as x-transformers' Linear; + 2 n d h FLOPs;
    the KV cache holds each key's log gate per head beside it; Table 1 unchanged."""
    counts_match(forgetting())
    cache_table1_kernels(forgetting(), HEADS)


def test_forget_gates_training_memory_adds_what_autograd_keeps():
    memory_matches({"kind": "forget_gates"})


def test_forget_gates_refusals(tmp_path):
    """Bidirectional attention (x-transformers' extension, not the paper's), and the static
    step graph, which has no slot for the gates, are refused by name."""
    with pytest.raises(ValidationError, match="forget_gates positions sum the gates"):
        ref.spec(Case(family="encoder-only", spec={"positional": {"kind": "forget_gates", "max_len": MAX_LEN}}))
    from tfspec.backends.onnx import export
    from tfspec.errors import TfspecError

    _, tf = ref.pair(forgetting())
    with pytest.raises(TfspecError, match="no static step graph"):
        export(tf, tmp_path, static_cache=True)


# --- CoPE: the contextual position kind ----------------------------------------------------------


def copy_cope(a, copier, prefix):
    cope = a.attend.cope
    copier.set(f"{prefix}.cope_table", cope.pos_emb)
    if cope.talking_heads is not None:
        copier.set(f"{prefix}.cope_mix", cope.talking_heads.weight[:, :, 0, 0])  # a 1 x 1 conv: (h, h)


def spread_table(xt):
    """Position tables off their zeros (the start of both), so that the term shows."""
    for block in attention_blocks(xt):
        block.attend.cope.pos_emb.normal_(0.0, 1.0)


def cope(limit: int = 4, mix: bool = False) -> Case:
    options = {"attn_use_cope": True, "attn_cope_max_pos": limit, "attn_cope_talking_heads": mix}
    positional = {"kind": "contextual", "max_len": MAX_LEN, "count_limit": limit, "count_mix_heads": mix}
    return Case(options, spec={"positional": positional}, hooks=(ref.attention_hook(copy_cope),),
                init=(spread_table,))


@pytest.mark.parametrize("limit, mix", [(4, False), (16, False), (4, True)])
def test_cope_matches_x_transformers_in_pytorch_and_cached_steps(limit, mix):
    check_torch(cope(limit, mix))
    check_cached(cope(limit, mix))


@pytest.mark.parametrize("mix", [False, True])
def test_cope_matches_x_transformers_in_onnx(mix, tmp_path):
    check_onnx(cope(4, mix), tmp_path)


def test_cope_changes_the_logits():
    ref.differs(cope())


def test_cope_is_the_papers_counting():
    """Golovneva et al. 2024, eq. 3-5, pair by pair: g_it = sigmoid(q_i·k_t / sqrt(d_k)),
    p_ij = min(sum_{t=j..i} g_it, P - 1), logits plus q_i · e[p_ij] with e[p] the table's rows
    floor(p) and ceil(p) interpolated."""
    limit = 4
    tf = randomised_tf(cope(limit))
    ids = ref.tokens()
    table = {}

    def scores(q, k):
        logits = dot(q, k) * DIM_HEAD ** -0.5
        h, n, _ = logits.shape
        out = np.zeros_like(logits)
        for head in range(h):
            for i in range(n):
                gates = 1 / (1 + np.exp(-logits[head, i, :i + 1]))
                for j in range(i + 1):
                    p = min(gates[j:].sum(), limit - 1)
                    lo, hi = int(np.floor(p)), int(np.ceil(p))
                    e = (p - lo) * table["e"][hi] + (1 - p + lo) * table["e"][lo]
                    out[head, i, j] = q[head, i] @ e
        return dot(q, k) + out / DIM_HEAD ** -0.5  # written_out scales the scores by d_k^-1/2

    state = {k: v.detach().double().numpy() for k, v in tf.state_dict().items()}
    layers = iter(f"decoder.layers.{i}.self_attn.cope_table" for i in range(ref.DEPTH))

    def per_layer(q, k):
        table["e"] = state[next(layers)]
        return scores(q, k)

    want = written_out(tf, ids[:1], per_layer)
    np.testing.assert_allclose(ref.logits_tf(tf, ids[:1]), want, atol=ref.TOLERANCE, rtol=0)


@pytest.mark.parametrize("mix", [False, True])
def test_cope_parameters_flops_cache_and_kernels(mix):
    """Per layer a (P, d_k) table (and the (h, h) mix); + 2 n P d_k h FLOPs (and 2 n² h² for the
    mix), as torch's counter over x-transformers; no cache beyond the keys; Table 1 unchanged."""
    counts_match(cope(4, mix))
    cache_table1_kernels(cope(4, mix), 0)


@pytest.mark.parametrize("mix", [False, True])
def test_cope_training_memory_adds_what_autograd_keeps(mix):
    memory_matches({"kind": "contextual", "count_mix_heads": mix})


def test_cope_refusals():
    with pytest.raises(ValidationError, match="contextual positions count the gates"):
        ref.spec(Case(family="encoder-only", spec={"positional": {"kind": "contextual", "max_len": MAX_LEN}}))
    with pytest.raises(ValidationError, match="count_limit"):
        ref.spec(Case(spec={"positional": {"kind": "contextual", "max_len": MAX_LEN, "count_limit": 1}}))
    with pytest.raises(ValidationError, match="count_limit shapes contextual positions, but kind is rotary"):
        ref.spec(Case(spec={"positional": {"kind": "rotary", "max_len": MAX_LEN, "count_limit": 8}}))


# --- both: left-padded prompts of different lengths decode as each alone ----------------------


@pytest.mark.parametrize("positional", [{"kind": "forget_gates"}, {"kind": "contextual", "count_mix_heads": True}])
def test_left_padded_prompts_decode_as_each_alone(positional, tmp_path):
    """Neither kind depends on the call's length (ragged batching takes them): padded keys are
    masked, so CoPE counts no gate of theirs, and the pads precede every real position, so no
    pad's forget gate lies between a real key and a later query. Scores of a left-padded batch and
    a beam search's tokens, in PyTorch and onnxruntime, equal each prompt's alone."""
    from tests.test_masks_as_data import BASE, LENGTHS, left_padded
    from tfspec.backends.onnx import OnnxModel, export
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search
    from tfspec.spec import Spec

    torch.manual_seed(0)
    model = build_module(Spec.model_validate(BASE | {"positional": positional | {"max_len": 96}})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(4, 100, n) for n in LENGTHS]
    tokens, mask = left_padded(prompts, 0)
    with torch.no_grad():
        batch = model.run({"tgt": torch.from_numpy(tokens), "tgt_mask": torch.from_numpy(mask)})["logits"]
        for row, prompt in enumerate(prompts):
            torch.testing.assert_close(batch[row, -len(prompt):], model(torch.from_numpy(prompt)[None])[0],
                                       atol=1e-4, rtol=0)
    export(model, tmp_path, parity=False)
    options = SearchOptions(beam=3, max_extra=6, max_length=6, min_length=6)
    for decoder in (TorchDecoder(model), OnnxModel(tmp_path, device="cpu").decoder()):
        alone = [search(decoder, None, options, prefix=p[None])[0] for p in prompts]
        assert search(decoder, None, options, prefix=tokens, prefix_mask=mask) == alone
