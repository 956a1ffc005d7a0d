"""ReZero and the attention z-loss (issue 57, research variants) against x-transformers and the
papers' equations.

ReZero (Bachlechner et al. 2020, eq. 5): x + alpha F(x), one learned scalar alpha per sub-layer
starting at 0, no norms: ``norm: none, sublayer_gain: 0, sublayer_gain_shape: scalar``, the same
gain op LayerScale (``sublayer_gain`` per feature) lowers to. x-transformers 2.31.10 has no ReZero
option; its LayerScale (``use_layerscale``, ``layerscale_init_value: 0``) with every feature's gain
set to one value is x + alpha F(Norm(x)), and with its norms replaced by the identity it is the
paper's equation.

The attention z-loss (ST-MoE's router z-loss on attention logits, Zoph et al. 2022; PaLM,
Chowdhery et al. 2022; x-transformers' ``attn_z_loss_weight`` and ``calc_z_loss``): an attention
field ``z_loss: w`` adds w x sum over heads of logsumexp(masked pre-softmax logits)^2 per real
query position to the training loss. x-transformers sums the layers' log-sum-exps before squaring
(cross terms between layers); tfspec squares each layer's own, as ST-MoE squares each router's:
the two agree for one attention layer (tested), and tfspec equals x-transformers' ``calc_z_loss``
applied layer by layer for more (tested, with and without padding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from tests import test_train_memory_ops, xtransformers_reference as ref
from tests.test_train_memory_ops import measured
from tests.variants_support import check, copy_layer_norm, differs, tiny, wrapper
from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import export
from tfspec.backends.torch import build_module
from tfspec.backends.torch.training.batches import Pairs, collate
from tfspec.backends.torch.training.tasks import task_for
from tfspec.layers.attention import fused_kernel
from tfspec.train_options import TrainConfig

torch.set_num_threads(2)

REZERO = {"sublayer_gain": 0.0, "sublayer_gain_shape": "scalar"}
"""tfspec's spelling of ReZero's alpha (module docstring)."""


# --- ReZero ------------------------------------------------------------------------------------

def alphas_hook(xt, copier):
    """Each x-transformers LayerScale's gains set to one random nonzero value, its sub-layer's alpha
    (x-transformers stores the gain's offset from 1 where ``unit_offset`` is on), copied as tfspec's
    one scalar."""
    torch.manual_seed(3)
    for layer in ref.xt_layers(xt):
        scale = wrapper(layer.block, "LayerScale")
        alpha = 0.5 + torch.rand(1)
        with torch.no_grad():
            scale.gamma.fill_(alpha.item() - float(scale.unit_offset))
        copier.set(f"{layer.prefix}_gain.gain", alpha)


def without_norms(xt, copier):
    """x-transformers' norms (each sub-layer's and the final one) replaced by the identity: what
    is left is the paper's x + alpha F(x)."""
    for norms, _, _ in xt.attn_layers.layers:
        norms[0] = torch.nn.Identity()
    xt.attn_layers.final_norm = torch.nn.Identity()


def no_norm(xt_norm, copier, name):
    """tfspec with norm: none has no norm parameters to copy."""


XT_SCALE = {"use_layerscale": True, "layerscale_init_value": 0.0}
PRE_NORM = ref.Case(XT_SCALE, spec=REZERO, hooks=(alphas_hook,))
"""A scalar gain per sub-layer in a pre-norm stack (x + alpha F(Norm(x)))."""
NO_NORM = ref.Case(XT_SCALE, spec=REZERO | {"norm": "none", "final_norm": None}, hooks=(without_norms, alphas_hook))
"""ReZero as the paper has it: no norms at all (norm: none leaves out the final norm by default)."""


CASES = {"pre-norm": (PRE_NORM, copy_layer_norm), "no-norm": (NO_NORM, no_norm)}


@pytest.mark.parametrize("name", CASES)
def test_rezero_equals_x_transformers_in_torch_cached_and_onnx(name, tmp_path):
    """Logits of PyTorch, KV-cached decoding and onnxruntime (after the export's parity checks)
    within 1e-4 of x-transformers' with the same nonzero alphas; off the same model without them."""
    case, copy_norm = CASES[name]
    check(case, tmp_path, copy_norm)
    differs(*CASES[name])


def test_rezero_counts_one_scalar_per_sub_layer():
    """Parameters: the model without a gain plus one per sub-layer (x-transformers' LayerScale
    holds d_model per sub-layer: its count less d_model - 1 each), as the PyTorch model holds
    them; FLOPs unchanged."""
    plain = build_graph(ref.spec(ref.Case(spec={"norm": "none", "final_norm": None})))
    graph = build_graph(ref.spec(NO_NORM))
    sublayers = 2 * ref.DEPTH
    assert analyze_params(graph).total == analyze_params(plain).total + sublayers
    assert analyze_params(graph).total == sum(p.numel() for p in build_module(graph).parameters())
    xt_count = sum(p.numel() for p in ref.xt_model(PRE_NORM).parameters())
    assert analyze_params(build_graph(ref.spec(PRE_NORM))).total == xt_count - sublayers * (ref.DIM - 1)
    assert analyze_flops(graph, 9).forward == analyze_flops(plain, 9).forward


def test_rezero_starts_as_the_identity_stack():
    """Every alpha starts at 0 (§3), so the untrained stack passes its input through: the logits
    are the token embeddings times the output projection, E[ids] W_out^T; yet alpha's gradient is
    nonzero, so training moves it off 0 (the paper's point)."""
    torch.manual_seed(0)
    model = build_module(ref.spec(NO_NORM))
    gains = {n: p for n, p in model.named_parameters() if n.endswith("_gain.gain")}
    assert len(gains) == 2 * ref.DEPTH and all(p.tolist() == [0.0] for p in gains.values())
    ids = ref.tokens()
    want = F.embedding(ids, model.get_parameter("decoder.embed.weight")) @ model.get_parameter("output.weight").T
    logits = model.train()(ids)
    torch.testing.assert_close(logits, want, atol=1e-6, rtol=0)
    F.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert all(p.grad.abs().item() > 0 for p in gains.values())


@pytest.mark.parametrize("fields, field, words", [
    ({"sublayer_gain_shape": "scalar"}, "sublayer_gain_shape", "sublayer_gain is not set"),
    ({"sublayer_gain": -0.5}, "sublayer_gain", "greater than or equal to 0"),
    ({"sublayer_gain": 0.0, "sublayer_gain_shape": "vector"}, "sublayer_gain_shape", "'feature' or 'scalar'"),
])
def test_gain_fields_that_do_not_fit_are_field_errors(fields, field, words):
    with pytest.raises(ValidationError) as info:
        tiny(**fields)
    error = info.value.errors()[0]
    assert words in error["msg"]
    assert error.get("ctx", {}).get("field", ".".join(map(str, error["loc"]))) == field


# --- the attention z-loss ------------------------------------------------------------------------

WEIGHT = 0.05
"""Larger than PaLM's 1e-4 so that the term stands well above the tolerance."""
Z_LOSS = ref.Case(attention={"z_loss": WEIGHT})


def batch(lengths=(9, 9), seed=1):
    """A language-model batch as training collates it: tgt_in = BOS y, tgt_out = y EOS, padded."""
    spec = ref.spec(Z_LOSS)
    rng = np.random.default_rng(seed)
    pairs = Pairs([np.array([spec.vocab.eos_id])] * len(lengths),
                  [np.array([spec.vocab.bos_id, *rng.integers(4, ref.VOCAB, n), spec.vocab.eos_id]) for n in lengths])
    return pairs, collate(pairs, np.arange(len(lengths)), spec.vocab.pad_id)


def tfspec_loss(tf, pairs, data) -> torch.Tensor:
    """The loss ``tfspec train`` minimises: the task's summed loss over the step's target tokens."""
    tf.train()
    spec = tf.graph.spec
    loss, _ = task_for(spec)(spec, TrainConfig(), pairs).loss(tf, tf, data)
    return loss / data["loss_mask"].sum()


def xt_loss(xt, data, per_layer: bool) -> torch.Tensor:
    """x-transformers' cross-entropy over the real targets plus its attention z-loss
    (``return_attn_z_loss``), or, ``per_layer``, its ``calc_z_loss`` of each layer's pre-softmax
    logits (masked to the real queries), summed."""
    from x_transformers.x_transformers import calc_z_loss

    real = data["tgt_mask"]
    logits, inter = xt(data["tgt_in"], mask=real, return_attn_z_loss=True, attn_z_loss_weight=WEIGHT)
    ce = F.cross_entropy(logits.transpose(1, 2), data["tgt_out"], reduction="none")[real].mean()
    if not per_layer:
        return ce + inter.attn_z_loss
    return ce + sum(calc_z_loss([t.pre_softmax_attn], mask=real, weight=WEIGHT) for t in inter.attn_intermediates)


def test_z_loss_is_x_transformers_total_loss_and_gradient_for_one_layer(monkeypatch):
    """One attention layer, where tfspec's per-layer square and x-transformers' square of the
    layers' sum agree: the training loss equals x-transformers' total (cross-entropy + aux loss)
    on the same weights and batch, and so do the gradients of the attention's projections."""
    monkeypatch.setattr(ref, "DEPTH", 1)
    xt, tf = ref.pair(Z_LOSS)
    pairs, data = batch()
    got, want = tfspec_loss(tf, pairs, data), xt_loss(xt, data, per_layer=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    got.backward()
    want.backward()
    a = ref.xt_layers(xt)[0].block
    torch.testing.assert_close(tf.get_parameter("decoder.layers.0.self_attn.w_qkv").grad,
                               torch.cat([a.to_q.weight.grad, a.to_k.weight.grad, a.to_v.weight.grad]),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("lengths", [(9, 9), (9, 5)], ids=["full", "padded"])
def test_z_loss_is_x_transformers_calc_z_loss_per_layer(lengths):
    """Two layers: each layer's term is x-transformers' ``calc_z_loss`` of its logits (mean over
    the real queries of the heads' summed squares); padded queries add nothing."""
    xt, tf = ref.pair(Z_LOSS)
    pairs, data = batch(lengths)
    torch.testing.assert_close(tfspec_loss(tf, pairs, data), xt_loss(xt, data, per_layer=True), rtol=1e-5, atol=1e-6)


def test_z_loss_changes_the_training_loss_and_gradients_not_the_logits():
    """The same weights with and without the field: eval logits equal (the fused kernel still
    runs), training logits equal too (spelled out), the loss is higher by the z-term and the
    gradients differ."""
    _, tf = ref.pair(Z_LOSS)
    base = build_module(ref.spec(ref.Case())).eval()
    base.load_state_dict(tf.state_dict())
    ids = ref.tokens()
    np.testing.assert_array_equal(ref.logits_tf(tf.eval(), ids), ref.logits_tf(base, ids))
    with torch.no_grad():
        torch.testing.assert_close(tf.train()(ids), base.train()(ids), rtol=0, atol=1e-5)
    pairs, data = batch()
    with_z, without = tfspec_loss(tf, pairs, data), tfspec_loss(base, pairs, data)
    assert with_z.item() > without.item() + 0.1
    with_z.backward()
    without.backward()
    name = "decoder.layers.0.self_attn.w_qkv"
    assert (tf.get_parameter(name).grad - base.get_parameter(name).grad).abs().max() > 1e-3


def test_z_loss_leaves_the_onnx_graphs_as_they_are(tmp_path):
    """Export is inference: every graph holds the same nodes as the model's without z_loss (the
    fused attention kept), and the export's parity checks pass."""
    import onnx

    graphs = {}
    for name, case in (("z", Z_LOSS), ("base", ref.Case())):
        _, tf = ref.pair(case)
        result = export(tf, tmp_path / name)
        assert result.ok, [str(c) for c in result.checks if not c.ok]
        graphs[name] = {f.name: [n.op_type for n in onnx.load(f, load_external_data=False).graph.node]
                        for f in sorted((tmp_path / name).glob("*.onnx"))}
    assert graphs["z"] == graphs["base"] and graphs["z"]


def test_z_loss_training_memory_is_what_autograd_keeps(monkeypatch):
    """``report --train``: in training the attention is spelled out (``fused_kernel`` asked for
    training), keeping the softmax weights and the masked logits log-sum-exp reads, plus the
    log-sum-exp; the bytes autograd keeps per attention grow with the batch as declared (the
    causal mask, one per call whatever the batch, cancels)."""
    graph = build_graph(ref.spec(Z_LOSS))
    nodes = [n for n in graph.nodes() if n.op == "attention"]
    assert all(fused_kernel(n) and not fused_kernel(n, training=True) for n in nodes)
    rows, kept = test_train_memory_ops.ROWS, []
    for batch_rows in (rows, 2 * rows):
        monkeypatch.setattr(test_train_memory_ops, "ROWS", batch_rows)
        kept.append(measured(build_module(graph).train(), graph))
    sizes = {"B": rows, "T": test_train_memory_ops.LENGTH}
    for node in nodes:
        declared = sum(train_memory._saved(graph, node, sizes).values())
        assert kept[1][node.name] - kept[0][node.name] == declared
    assert analyze_flops(graph, 9).forward == analyze_flops(build_graph(ref.spec(ref.Case())), 9).forward


@pytest.mark.parametrize("attention, words", [
    ({"z_loss": -1.0}, "greater than or equal to 0"),
    ({"z_loss": 1e-4, "sigmoid_bias": -2.0}, "sigmoid_bias replaces"),
    ({"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
      "z_loss": 1e-4}, "do not compute z_loss"),
])
def test_z_loss_refusals_name_the_field(attention, words):
    with pytest.raises(ValidationError) as info:
        ref.spec(ref.Case(attention=attention))
    error = info.value.errors()[0]
    assert words in error["msg"]
    assert error.get("ctx", {}).get("field", ".".join(map(str, error["loc"]))).endswith("z_loss")
