"""Switch Transformers (``model_type: switch_transformers``): transformers'
SwitchTransformersForConditionalGeneration as a tfspec spec (google/switch-base-8 .. switch-base-256,
switch-large-128, switch-c-2048).

T5's computation (``t5.py``: pre-RMSNorm, no biases, unscaled attention, one relative bias table
per stack, the output scaled by d_model^-0.5 when tied) with a sparse feed-forward layer every
``encoder_sparse_step`` (``decoder_sparse_step``) layers, layer i sparse where i % step == 1 (or
every layer at step 1): tfspec's ``moe`` with ``num_experts`` experts ``d_ff`` wide (``dense_act_fn``,
not gated), top-1 of a softmax router in float32, its output weighted by the chosen probability
(``top_k: 1``, ``normalize: false``). The router's jitter noise multiplies its input while
training only.

Expert capacity: transformers lets at most ``expert_capacity`` positions of a sequence reach an
expert, counting from the first; the rest skip the sub-layer (output 0, the residual passes
them on): the ``moe`` layer's ``capacity``. It counts the positions of one forward call, so
decoding steps of one position (``generate`` with its cache) never reach it.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, activation, number, register, repeated_layer
from tfspec.interop.hf.layouts import Stack
from tfspec.interop.hf.t5 import T5, attention_rules

POSITIONS = 512
"""T5's n_positions, the bound tfspec puts on inputs (relative positions have none)."""


@register
class SwitchTransformers(T5):
    model_type = "switch_transformers"
    title = "Switch Transformers"
    architectures = {"SwitchTransformersForConditionalGeneration": ""}
    export_architecture = "SwitchTransformersForConditionalGeneration"
    grouped = True
    mapped = (*(k for k in T5.mapped if k not in ("feed_forward_proj", "scale_decoder_outputs", "n_positions")),
              "dense_act_fn", "num_experts", "expert_capacity", "num_sparse_encoder_layers",
              "num_sparse_decoder_layers", "encoder_sparse_step", "decoder_sparse_step", "router_aux_loss_coef",
              "router_z_loss_coef")
    required = T5.required | {"router_bias": (False,), "router_dtype": ("float32",)}
    ignored = {"initializer_factor": "initialisation of untrained weights",
               "bos_token_id": "decoding starts from decoder_start_token_id; bos_token_id only tells tokenizers",
               "router_jitter_noise": "noise on the router's input while training only",
               "router_ignore_padding_tokens": "stored by the router, read by no computation of transformers 5",
               "add_router_probs": "whether transformers returns the router's outputs, not what it computes"}
    defaults = {"d_model": 768, "num_heads": 12, "num_layers": 12}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        act = c.get("dense_act_fn", "relu")
        activation(c, "dense_act_fn", where, "relu")  # refused by name here, not as T5's feed_forward_proj
        data = super().spec_data(replace(source, config=c | {"feed_forward_proj": act}))
        layers = {stack: data[stack].pop("layers") for stack in ("encoder", "decoder")}
        moe = {"kind": "moe", "experts": number(c, "num_experts", where, default=8), "top_k": 1, "normalize": False,
               "capacity": number(c, "expert_capacity", where, default=64),
               "balance": number(c, "router_aux_loss_coef", where, float, 0.001),
               "z_loss": number(c, "router_z_loss_coef", where, float, 0.001)}
        for stack in ("encoder", "decoder"):
            block = data[stack].pop("block")
            flags = [self._sparse(c, stack, i, layers, where) for i in range(layers[stack])]
            data[stack]["groups"] = [{"layers": len(list(run)), "block": [*block[:-1], moe if sparse else "ffn"]}
                                     for sparse, run in groupby(flags)]
        data["positional"]["max_len"] = POSITIONS
        return data

    def _sparse(self, c: dict, stack: str, i: int, layers: dict, where: str) -> bool:
        """Whether layer i of ``stack`` is sparse, as SwitchTransformersStack decides: by the
        config's ``<stack>_sparse_step``, else num_layers // num_sparse_<stack>_layers."""
        count = number(c, f"num_sparse_{stack}_layers", where, default=3)
        step = number(c, f"{stack}_sparse_step", where, default=layers[stack] // count if count else layers[stack])
        return step > 0 and (i % step == 1 or step == 1)

    def _output(self, source: Source, d_model: int) -> dict:
        """The output is scaled, and lm_head tied, as tie_word_embeddings says (true by default)."""
        c, where = source.config, source.where
        tied = c.get("tie_word_embeddings", True)
        if not isinstance(tied, bool):
            return super()._output(source, d_model)  # T5's reading refuses it by name
        return {"tie_embeddings": "all" if tied else "inputs", "output_scale": d_model ** -0.5 if tied else 1.0}

    @staticmethod
    def layer_rules(layer) -> list[Rule]:
        """T5's rules, with a sparse layer's router and experts."""
        return _layer(layer)

    def config(self, spec) -> dict:
        config = super().config(spec)
        for key in ("feed_forward_proj", "scale_decoder_outputs", "n_positions"):
            del config[key]
        moe = next((s for name, _ in spec.stacks for layer in spec.plan(name) for s in layer.sublayers
                    if s.kind == "moe"), None)
        _, ffn = repeated_layer(spec, "encoder")  # layer 0, dense unless every layer is sparse
        config["dense_act_fn"] = ACTIVATION_NAMES[ffn.activation]
        if moe is not None:  # no capacity: one no sequence the spec reads can reach
            config |= {"num_experts": moe.experts, "router_aux_loss_coef": moe.balance,
                       "router_z_loss_coef": moe.z_loss, "expert_capacity": moe.capacity or spec.positional.max_len}
        for stack, _ in spec.stacks:
            sparse = [layer.index for layer in spec.plan(stack) if layer.ffn is None]
            layers = len(spec.plan(stack))
            config |= {f"num_sparse_{stack}_layers": len(sparse),
                       f"{stack}_sparse_step": layers // len(sparse) if sparse else layers}
        return config


def _layer(layer) -> list[Rule]:
    """T5's layer with Switch's names: the feed-forward sub-layer's ``mlp.wi``/``mlp.wo``, or
    in a sparse layer its router (``mlp.router.classifier``) and one ``wi``/``wo`` per expert
    (``mlp.experts.expert_{j}``), stacked into the ``moe`` node's (E, ...) matrices."""
    rules, ours, ffn = attention_rules(layer)
    moe = next((name for name, s in zip(layer.names, layer.sublayers) if s.kind == "moe"), None)
    if moe is None:
        return rules + [Rule(ours + "ffn.w_1", (ffn + "mlp.wi.weight",)),
                        Rule(ours + "ffn.w_2", (ffn + "mlp.wo.weight",)),
                        Rule(ours + "ffn_norm.weight", (ffn + "layer_norm.weight",))]
    experts = next(s for s in layer.sublayers if s.kind == "moe").experts
    return rules + [Rule(moe + "_norm.weight", (ffn + "layer_norm.weight",)),
                    Rule(moe + ".w_router", (ffn + "mlp.router.classifier.weight",)),
                    *(Rule(f"{moe}.{w}", tuple(f"{ffn}mlp.experts.expert_{j}.{name}.weight" for j in range(experts)),
                           Stack()) for w, name in (("w_1", "wi"), ("w_2", "wo")))]
