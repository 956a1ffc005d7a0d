"""NLLB-MoE (``model_type: nllb-moe``): transformers' NllbMoeForConditionalGeneration and
NllbMoeModel as tfspec specs (facebook/nllb-moe-54b).

M2M-100's encoder-decoder (``m2m_100.py``: pre-norm, fairseq's sinusoids from row pad + 1, scaled
embeddings tied to the output) whose feed-forward sub-layer is, in every ``encoder_sparse_step``-th
(``decoder_sparse_step``-th) layer (layer i where (i + 1) % step == 0), a ``moe`` of
``num_experts`` biased experts (``fc1``/``fc2``): the top-2 of a float32 softmax router, their
probabilities renormalised to sum to 1 (``second_expert_policy: all``, the published one; "sampling"
and "random" draw the second expert at random even at inference, and are refused), each expert's
output times 1 - ``moe_token_dropout`` (transformers' inference-time scaling of that dropout:
``routed_scale``; training does not drop tokens here).

Capacity: at inference transformers lets ceil(``moe_eval_capacity_token_fraction`` x tokens of
the batch) positions reach an expert, counted over the whole flattened batch; at the published
1.0 (or more) that is never reached (a token takes two different experts), so no position is
dropped and ``expert_capacity``, ``batch_prioritized_routing`` and
``normalize_router_prob_before_dropping`` change nothing. A smaller fraction would make a
position's output depend on the other rows of its batch: refused by name.

transformers 5 (up to 5.24 at least) runs NllbMoeExperts on a one-hot of the top-1 mask, which
applies ``expert_1`` with the first probability and ``expert_0`` with the second to every
token whatever the router chose; tfspec computes the routing of fairseq and of transformers 4
(each token through its two chosen experts), which the tests check against transformers with
that dispatch restored.
"""

from __future__ import annotations

from itertools import groupby

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, norm_rules, number, register
from tfspec.interop.hf.layouts import Stack
from tfspec.interop.hf.m2m_100 import M2M100
from tfspec.interop.hf.marian import _attention

NO_DROPS = "nothing is dropped at inference with moe_eval_capacity_token_fraction >= 1 (checked)"


@register
class NllbMoe(M2M100):
    model_type = "nllb-moe"
    title = "NLLB-MoE"
    architectures = {"NllbMoeForConditionalGeneration": "model.", "NllbMoeModel": ""}
    export_architecture = "NllbMoeForConditionalGeneration"
    grouped = True
    mapped = (*M2M100.mapped, "num_experts", "encoder_sparse_step", "decoder_sparse_step", "router_aux_loss_coef",
              "router_z_loss_coef", "moe_token_dropout", "moe_eval_capacity_token_fraction")
    required = M2M100.required | {"router_bias": (False,), "router_dtype": ("float32",),
                                  "second_expert_policy": ("all",)}
    ignored = M2M100.ignored | {
        "expert_capacity": "read while training, or at inference with moe_eval_capacity_token_fraction <= 0 "
                           "(refused)",
        "batch_prioritized_routing": "the order in which positions fill an expert's capacity; " + NO_DROPS,
        "normalize_router_prob_before_dropping": "whether the two probabilities are renormalised before or after "
                                                 "dropping; " + NO_DROPS,
        "router_ignore_padding_tokens": "whether padding positions are routed: their outputs are never read, and "
                                        + NO_DROPS,
        "output_router_logits": "whether transformers returns the router's logits, not what it computes"}
    exported = {"router_bias": False, "router_dtype": "float32", "second_expert_policy": "all",
                "moe_eval_capacity_token_fraction": 1.0}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        fraction = number(c, "moe_eval_capacity_token_fraction", where, float, 1.0)
        if fraction < 1:
            raise TfspecError(f"{where}: moe_eval_capacity_token_fraction: {_show(fraction)} is not supported; below "
                              "1 transformers drops positions by a capacity counted over the whole batch: tfspec "
                              "imports NLLB-MoE with 1.0 (the published value) or more")
        data = super().spec_data(source)
        for stack in ("encoder", "decoder"):
            layers, block = data[stack].pop("layers"), data[stack].pop("block")
            d_ff = block[-1]["d_ff"] if isinstance(block[-1], dict) else None
            moe = self._moe(c, where) | ({"d_ff": d_ff} if d_ff else {})
            step = number(c, f"{stack}_sparse_step", where, default=4)
            flags = [step > 0 and (i + 1) % step == 0 for i in range(layers)]
            data[stack]["groups"] = [{"layers": len(list(run)), "block": [*block[:-1], moe if sparse else block[-1]]}
                                     for sparse, run in groupby(flags)]
        return data

    def _moe(self, c: dict, where: str) -> dict:
        dropout = number(c, "moe_token_dropout", where, float, 0.2)
        if not 0 <= dropout < 1:
            raise TfspecError(f"{where}: moe_token_dropout must be at least 0 and below 1, got {_show(dropout)}")
        return {"kind": "moe", "experts": number(c, "num_experts", where, default=128), "top_k": 2,
                "normalize": True, "bias": True, "routed_scale": 1 - dropout,
                "balance": number(c, "router_aux_loss_coef", where, float, 0.001),
                "z_loss": number(c, "router_z_loss_coef", where, float, 0.001)}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("shared.weight",))]
        for stack in ("encoder", "decoder"):
            for layer in spec.plan(stack):
                rules += _layer(stack, layer)
            rules += norm_rules(f"{stack}.norm", f"{stack}.layer_norm")
        return rules

    def config(self, spec) -> dict:
        config = super().config(spec)
        moe = next((s for name, _ in spec.stacks for layer in spec.plan(name) for s in layer.sublayers
                    if s.kind == "moe"), None)
        if moe is not None:
            config |= {"num_experts": moe.experts, "router_aux_loss_coef": moe.balance,
                       "router_z_loss_coef": moe.z_loss, "moe_token_dropout": round(1 - moe.routed_scale, 12)}
        for stack, _ in spec.stacks:  # the first sparse layer is layer step - 1
            sparse = [layer.index for layer in spec.plan(stack) if layer.ffn is None]
            config[f"{stack}_sparse_step"] = sparse[0] + 1 if sparse else 0
        return config


def _layer(stack: str, layer) -> list[Rule]:
    """One layer with NLLB-MoE's names: M2M-100's attention projections, ``cross_attention``
    for its ``encoder_attn``, ``ff_layer_norm``, and ``ffn.fc1``/``fc2`` or in a sparse layer
    ``ffn.router.classifier`` and ``ffn.experts.expert_{j}.fc1``/``fc2``, stacked into the
    ``moe`` node's (E, ...) tensors."""
    ours = f"{stack}.layers.{layer.index}."
    rules = [*_attention(ours + "self_attn", ours + "self_attn", "qkv"),
             *norm_rules(ours + "self_attn_norm", ours + "self_attn_layer_norm")]
    if stack == "decoder":
        rules += [*_attention(ours + "cross_attn", ours + "cross_attention", "q"),
                  *_attention(ours + "cross_attn", ours + "cross_attention", "kv"),
                  *norm_rules(ours + "cross_attn_norm", ours + "cross_attention_layer_norm")]
    moe, name = next(((s, n) for s, n in zip(layer.sublayers, layer.names) if s.kind == "moe"), (None, None))
    if moe is None:
        return rules + [*(Rule(f"{ours}ffn.{kind}_{i}", (f"{ours}ffn.fc{i}.{name}",))
                          for i in (1, 2) for kind, name in (("w", "weight"), ("b", "bias"))),
                        *norm_rules(ours + "ffn_norm", ours + "ff_layer_norm")]
    return rules + [Rule(name + ".w_router", (ours + "ffn.router.classifier.weight",)),
                    *(Rule(f"{name}.{kind}_{i}", tuple(f"{ours}ffn.experts.expert_{j}.fc{i}.{tensor}"
                                                        for j in range(moe.experts)), Stack())
                      for i in (1, 2) for kind, tensor in (("w", "weight"), ("b", "bias"))),
                    *norm_rules(name + "_norm", ours + "ff_layer_norm")]
