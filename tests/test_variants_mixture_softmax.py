"""Mixture of softmaxes (``softmax_mixture``; Yang et al. 2017, "Breaking the Softmax Bottleneck")
against x-transformers' ``mixture_of_softmax`` (``TransformerWrapper``) with its weights copied,
and against the paper's eq. 3 written out: PyTorch, KV-cached steps and ONNX within 1e-4,
parameter and FLOP counts, and that the log-probabilities it outputs stay the model's NLL and
distribution for the training loss, greedy search and sampling."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests import xtransformers_reference as ref
from tests.variants_support import saved_bytes
from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.training.schedule import smoothed_loss
from tfspec.ir.ops import definition
from tfspec.search import Picker, Sampling, SearchOptions, search
from tfspec.spec import Spec

K = 3
XT = {"mixture_of_softmax": True, "mixture_of_softmax_k": K}
"""x-transformers' spelling (TransformerWrapper's options)."""
UNTIED = ref.Case(spec={"softmax_mixture": {"components": K, "activation": "none"}})
TIED = ref.Case(spec={"softmax_mixture": {"components": K, "activation": "none"}, "tie_embeddings": "output",
                      "output_scale": ref.DIM ** -0.5})
"""x-transformers' tied head multiplies its logits by dim^-0.5: tfspec's output_scale on each h_k."""


def xt_model(tied: bool = False, mixture: bool = True):
    """x-transformers' decoder of the harness's baseline with the mixture on its wrapper."""
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(num_tokens=ref.VOCAB, max_seq_len=ref.MAX_LEN, use_abs_pos_emb=False,
                              tie_embedding=tied, **(XT if mixture else {}),
                              attn_layers=Decoder(dim=ref.DIM, depth=ref.DEPTH, heads=ref.HEADS,
                                                  attn_dim_head=ref.DIM_HEAD)).eval()


def pair(case: ref.Case = UNTIED, seed: int = 0):
    """(x-transformers, tfspec) with the same weights: the harness's baseline roles, then W_k and W_pi."""
    torch.manual_seed(seed)
    tied = case.spec.get("tie_embeddings") == "output"
    xt, tf = xt_model(tied), build_module(ref.spec(case)).eval()
    copier = ref.Copier(tf)
    if tied:  # neither side holds an output matrix: the baseline's roles but that one
        head = SimpleNamespace(weight=xt.token_emb.emb.weight)
        view = SimpleNamespace(token_emb=xt.token_emb, attn_layers=xt.attn_layers, to_logits=head)
        ref.copy_baseline(view, SimpleNamespace(set=lambda name, t: name == "output.weight" or copier.set(name, t)),
                          "decoder-only")
    else:
        ref.copy_baseline(xt, copier, "decoder-only")
    copier.set("output.components", xt.to_mixture[0].weight)
    copier.set("output.prior", xt.combine_mixture.weight)
    assert copier.unwritten() == []
    return xt, tf


def test_untied_mixture_equals_x_transformers_in_pytorch_cached_steps_and_onnx(tmp_path):
    """Log-probabilities of the full sequence, of KV-cached steps one token at a time, and of the
    ONNX export (after the export's own parity checks, steps and greedy decoding included) within
    1e-4 of x-transformers' log(sum_k pi_k softmax(logits_k))."""
    xt, tf = pair()
    ids = ref.tokens()
    want = ref.logits_xt(xt, ids)
    np.testing.assert_allclose(ref.logits_tf(tf, ids), want, atol=ref.TOLERANCE, rtol=0)
    state, rows = ref.DecodeState(), []
    with torch.no_grad():
        for t in range(ids.shape[1]):
            rows.append(tf.run({"tgt": ids[:, t:t + 1]}, state=state)["logits"][:, -1].numpy())
    np.testing.assert_allclose(np.stack(rows, 1), want, atol=ref.TOLERANCE, rtol=0)
    result = export(tf, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    onnx = OnnxModel(tmp_path, device="cpu")
    np.testing.assert_allclose(onnx.logits(tgt=ids.numpy()), want, atol=ref.TOLERANCE, rtol=0)
    options, prompt = SearchOptions(beam=1, max_extra=6, min_length=6, max_length=6), ref.tokens(2, 3, 2).numpy()
    assert search(onnx.decoder(), None, options, prefix=prompt) == search(TorchDecoder(tf), None, options,
                                                                           prefix=prompt)


def test_tied_mixture_equals_x_transformers():
    """Tied to the embeddings, x-transformers' logits scaled by dim^-0.5 (``output_scale``)."""
    xt, tf = pair(TIED)
    ids = ref.tokens()
    np.testing.assert_allclose(ref.logits_tf(tf, ids), ref.logits_xt(xt, ids), atol=ref.TOLERANCE, rtol=0)


@torch.no_grad()
def test_the_papers_tanh_components_follow_eq_3_written_out():
    """``activation: tanh`` (the default, the paper's h_k = tanh(W_k h)): x-transformers' last
    hidden states through eq. 3 written out with its weights, one component at a time."""
    xt, untied = pair()
    tf = build_module(ref.spec(ref.Case(spec={"softmax_mixture": {"components": K}}))).eval()
    tf.load_state_dict(untied.state_dict())
    ids, seen = ref.tokens(), []
    xt.to_mixture.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    xt(ids)
    h = seen[0]  # (B, T, d): the last hidden states, after the final norm
    w_k, w_pi, w = xt.to_mixture[0].weight, xt.combine_mixture.weight, xt.to_logits.weight
    prior = torch.softmax(h @ w_pi.T, -1)  # (B, T, K)
    mixed = sum(prior[..., k, None] * torch.softmax(torch.tanh(h @ w_k[k * ref.DIM:(k + 1) * ref.DIM].T) @ w.T, -1)
                for k in range(K))
    np.testing.assert_allclose(ref.logits_tf(tf, ids), torch.log(mixed).numpy(), atol=ref.TOLERANCE, rtol=0)


def test_the_mixture_changes_the_output_from_one_softmax():
    """Against the same weights without the mixture (its log-softmax, on both sides)."""
    xt, tf = pair()
    ids = ref.tokens()
    base_xt = xt_model(mixture=False)
    base_xt.load_state_dict(xt.state_dict(), strict=False)
    base_tf = build_module(ref.spec(UNTIED.without_variant())).eval()
    base_tf.load_state_dict({k: v for k, v in tf.state_dict().items() if k in base_tf.state_dict()})
    for ours, theirs in ((ref.logits_tf(tf, ids), ref.logits_tf(base_tf, ids)),
                         (ref.logits_xt(xt, ids), ref.logits_xt(base_xt, ids))):
        assert np.abs(ours - torch.log_softmax(torch.from_numpy(theirs), -1).numpy()).max() > 1e-2


@pytest.mark.parametrize("tied", [False, True])
def test_parameters_and_flops_match_x_transformers(tied):
    """K d^2 + d K more parameters than the baseline (tied or untied token matrix), as
    x-transformers counts its model; forward FLOPs what torch's counter sees it compute (the K
    token projections included)."""
    case = TIED if tied else UNTIED
    torch.manual_seed(0)
    xt, graph = xt_model(tied), build_graph(ref.spec(case))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    base = analyze_params(build_graph(ref.spec(case.without_variant()) if not tied else
                                      ref.spec(ref.Case(spec={"tie_embeddings": "output"})))).total
    assert analyze_params(graph).total - base == K * ref.DIM ** 2 + ref.DIM * K
    n = 9
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        xt(ref.tokens(1, n))
    counted = counter.get_total_flops()
    assert abs(analyze_flops(graph, n).forward - counted) <= 0.01 * counted


@torch.no_grad()
def test_kv_cached_greedy_search_equals_recomputing_every_step():
    """tfspec's search (beam 1, KV-cached steps) against argmax of x-transformers' whole-sequence
    output recomputed after each token; sampling draws from exp of the step's values, which are
    the mixture's own log-probabilities (log_softmax of log-probabilities is the identity)."""
    xt, tf = pair()
    prompt = ref.tokens(2, 3, 2)
    got = search(TorchDecoder(tf), None, SearchOptions(beam=1, max_extra=6, min_length=6, max_length=6),
                 prefix=prompt.numpy())
    seq = prompt
    for _ in range(6):
        seq = torch.cat([seq, xt(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert got == seq[:, prompt.shape[1]:].tolist()
    values, ids, _ = TorchDecoder(tf).step(TorchDecoder(tf).start(None), prompt.numpy(), ref.VOCAB)
    want = ref.logits_xt(xt, prompt)[:, -1]
    np.testing.assert_allclose(values, np.take_along_axis(want, ids, 1), atol=ref.TOLERANCE, rtol=0)
    picker = Picker(Sampling(seed=3))
    draws = np.stack([picker(values, ids) for _ in range(4000)])  # (draws, B)
    frequency = (draws[:, 0, None] == np.arange(ref.VOCAB)).mean(0)
    assert np.abs(frequency - np.exp(want[0])).max() < 0.03


def test_a_training_step_lowers_the_loss_which_is_the_nll_of_the_log_probabilities():
    """The training loss, taking the output as the log-probabilities the spec declares it to be,
    equals F.nll_loss on it (as x-transformers trains its mixture) and the log-softmax path it
    skips (the identity; with label smoothing too); a few Adam steps on one batch lower it."""
    torch.manual_seed(0)
    spec = ref.spec(ref.Case(spec={"softmax_mixture": {"components": K}}))
    assert spec.outputs_log_probs and not ref.spec(ref.Case()).outputs_log_probs
    model = build_module(spec).train()
    ids = ref.tokens(4, 10)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(5):
        out = model(ids[:, :-1])
        loss, nll = smoothed_loss(out, ids[:, 1:], pad=0, smoothing=0.0, normalised=spec.outputs_log_probs)
        torch.testing.assert_close(loss, F.nll_loss(out.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum"))
        for smoothing in (0.0, 0.1):
            torch.testing.assert_close(smoothed_loss(out, ids[:, 1:], 0, smoothing, normalised=True),
                                       smoothed_loss(out, ids[:, 1:], 0, smoothing), atol=1e-4, rtol=1e-6)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0, losses


def test_report_train_counts_what_autograd_keeps():
    """The op's saved tensors (its input, the components, the priors' and components' log-softmax,
    their sum and the output) against what autograd saves running the PyTorch module."""
    spec = ref.spec(ref.Case(spec={"softmax_mixture": {"components": K}}))
    graph = build_graph(spec)
    node = graph.node("output")
    model = build_module(spec)
    module = model.get_submodule("output")
    x = torch.randn(2, 5, ref.DIM, requires_grad=True)
    sizes = {"B": 2, "T": 5}
    declared = definition("softmax_mixture").saved(graph, node, sizes, lambda name: 4 * 2 * 5 * (
        ref.DIM if name != "output" else ref.VOCAB))
    assert saved_bytes(model, module, x) == sum(declared.values())


@pytest.mark.parametrize("fields, where", [
    ({"output_softcap": 30.0}, "output_softcap"),
    ({"softmax_mixture": {"components": 1}}, "softmax_mixture.components"),
    ({"softmax_mixture": {"components": 2, "temperature": 1}}, "softmax_mixture\n  unknown field"),
    ({"softmax_mixture": {"activation": "relu"}}, "softmax_mixture.activation"),
])
def test_bad_mixtures_are_refused_naming_the_field(fields, where):
    with pytest.raises(ValidationError) as caught:
        Spec.model_validate(ref.BASE | {"family": "decoder-only", "decoder": {"layers": 1, "block": ["ffn"]},
                                        "softmax_mixture": {"components": 2}} | fields)
    assert where in str(caught.value)
