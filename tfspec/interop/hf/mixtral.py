"""Mixtral (``model_type: mixtral``): transformers' MixtralForCausalLM and MixtralModel as tfspec
specs (mistralai/Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1 and their -Instruct models), and
``Experts``, what every mixture-of-experts family adds to its dense parent.

Mistral (``llama.py``: pre-RMSNorm, grouped-query attention, rotary positions, the sliding
window as causal restricted attention) whose every feed-forward layer is a mixture of
``num_local_experts`` SwiGLU experts ``intermediate_size`` wide (tfspec's ``moe`` layer): each
token runs the ``num_experts_per_tok`` experts a softmax router scores highest, weighted by
those probabilities renormalised to sum to 1 (Mixtral always renormalises). Checkpoints store
each expert apart (``block_sparse_moe.experts.{j}.w1``, ``w3``, ``w2``: gate, linear branch,
output; ``layouts.Stack``), as transformers 5 saves them although it fuses them in
memory. No projection is ever biased: ``attention_bias`` and ``mlp_bias`` are refused as
unknown. Defaults are MixtralConfig's (Mixtral-8x7B's shape, 131072 positions).
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import groupby
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, flag, number, register
from tfspec.interop.hf.layouts import Stack
from tfspec.interop.hf.llama import Llama, Mistral

MOE_IGNORED = {
    "router_aux_loss_coef": "the weight of the load-balancing loss: training only",
    "output_router_logits": "whether transformers returns the router's logits (outputs, not the computation)"}
"""Fields of every mixture-of-experts configuration that do not change the computation."""


class Experts:
    """A mixture-of-experts family: its dense parent (listed after this among the bases) with a
    ``moe`` sub-layer in place of the feed-forward one in the layers ``_sparse`` picks, read from
    the tensors under ``layers.{i}.{router}``: ``gate`` (the router) and ``experts.{j}.{part}``."""

    router: ClassVar[str] = "mlp"
    """The module of a sparse layer in the checkpoint (Mixtral's is block_sparse_moe)."""
    parts: ClassVar[dict[str, str]] = {"w_1": "gate_proj", "w_3": "up_proj", "w_2": "down_proj"}
    """An expert's IR matrix -> its name in the checkpoint's ``experts.{j}``."""
    expert_counts: ClassVar[tuple[str, ...]] = ("num_experts",)
    """The fields naming the number of experts (transformers' ``attribute_map`` aliases);
    the first is the one ``spec_data`` reads and ``config`` writes."""
    renormalises: ClassVar[bool | None] = None
    """Whether the top_k probabilities are renormalised: always (Mixtral: True), or as
    ``norm_topk_prob`` says (None: Qwen2-MoE, Qwen3-MoE, OLMoE)."""
    defaults: ClassVar[dict] = {}
    """The config class's values where those ``Llama.spec_data`` falls back on differ."""
    routing: ClassVar[dict] = {"scoring": "softmax", "score_bias": False, "groups": 1, "routed_scale": 1.0,
                               "input_weighted": False}
    """The ``moe`` router options the family's routers all have: a spec routed otherwise is
    not exported as the family."""

    def spec_data(self, source: Source) -> dict:
        c = self.defaults | _counted(source.config, self.expert_counts, source.where)
        data = super().spec_data(replace(source, config=c))
        attention, layers = data["decoder"]["block"][0], data["decoder"]["layers"]
        moe = self._moe(c, source.where)
        groups = [{"layers": len(list(run)), "block": [attention, moe if sparse else "ffn"]}
                  for sparse, run in groupby(self._sparse(c, source.where, layers))]
        return data | {"decoder": groups[0] if len(groups) == 1 else {"groups": groups}}

    def _sparse(self, c: dict, where: str, layers: int) -> list[bool]:
        """Whether each layer's feed-forward layer is a mixture of experts (all of them, unless said)."""
        return [True] * layers

    def _moe(self, c: dict, where: str) -> dict:
        """The block entry of a sparse layer; its experts as wide as ``d_ff`` unless a family says."""
        experts, key = number(c, self.expert_counts[0], where), "num_experts_per_tok"
        top_k = number(c, key, where)
        if not 1 <= top_k <= experts:
            raise TfspecError(f"{where}: {key} ({top_k}) must be between 1 and {self.expert_counts[0]} ({experts})")
        normalize = self.renormalises if self.renormalises is not None else flag(c, "norm_topk_prob", where, False)
        return {"kind": "moe", "experts": experts, "top_k": top_k, "normalize": normalize}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """The parent's rules, a sparse layer's feed-forward ones replaced by its router's and experts'."""
        sparse = {f"decoder.layers.{layer.index}.": (layer.index, name, sub) for layer in spec.plan("decoder")
                  for name, sub in zip(layer.names, layer.sublayers) if sub.kind == "moe"}
        rules = [r for r in super().rules(spec, architecture)
                 if not (r.ir.startswith(tuple(sparse)) and ".ffn" in r.ir)]
        return rules + [rule for i, name, moe in sparse.values() for rule in self._moe_rules(i, name, moe)]

    def _moe_rules(self, i: int, name: str, moe) -> list[Rule]:
        theirs = f"layers.{i}.{self.router}."
        rules = [Rule(f"{name}_norm.weight", (f"layers.{i}.post_attention_layernorm.weight",)),
                 Rule(f"{name}.w_router", (f"{theirs}gate.weight",))]
        rules += [Rule(f"{name}.{ours}", tuple(f"{theirs}experts.{j}.{part}.weight" for j in range(moe.experts)),
                       Stack()) for ours, part in self.parts.items()]
        if moe.shared:  # Qwen2-MoE's shared expert and its gate
            rules += [Rule(f"{name}.w_shared_{n}", (f"{theirs}shared_expert.{part}.weight",))
                      for n, part in (("1", "gate_proj"), ("3", "up_proj"), ("2", "down_proj"))]
        if moe.shared_gate:
            rules.append(Rule(f"{name}.w_shared_gate", (f"{theirs}shared_expert_gate.weight",)))
        return rules

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if (moe := first_moe(spec)) is None:
            return f"{self.title}'s feed-forward layers are mixtures of experts; this spec has none"
        if other := [f"{k} {getattr(moe, k)}" for k, v in self.routing.items() if getattr(moe, k) != v]:
            return (f"{self.title}'s routers have {', '.join(f'{k} {v}' for k, v in self.routing.items())}; "
                    f"this spec's have {', '.join(other)}")
        return None

    def config(self, spec) -> dict:
        moe = first_moe(spec)
        normalize = {} if self.renormalises is not None else {"norm_topk_prob": moe.normalize}
        return super().config(spec) | {self.expert_counts[0]: moe.experts, "num_experts_per_tok": moe.top_k} | normalize


def first_moe(spec):
    """The first mixture-of-experts sub-layer of the decoder, or None."""
    return next((s for layer in spec.plan("decoder") for s in layer.sublayers if s.kind == "moe"), None)


def _counted(config: dict, names: tuple[str, ...], where: str) -> dict:
    """``config`` with the number of experts under ``names[0]``, whichever alias it was written
    as (transformers 5 writes Qwen3-MoE's num_experts as num_local_experts); refused when two disagree."""
    given = {name: number(config, name, where) for name in names if config.get(name) is not None}
    if len({json.dumps(v) for v in given.values()}) > 1:
        raise TfspecError(f"{where}: {' and '.join(f'{k} ({_show(v)})' for k, v in given.items())} disagree; "
                          "transformers reads them as one field")
    return {k: v for k, v in config.items() if k not in names} | {names[0]: v for v in given.values()}


@register
class Mixtral(Experts, Mistral):
    model_type = "mixtral"
    title = "Mixtral"
    architectures = {"MixtralForCausalLM": "model.", "MixtralModel": ""}
    export_architecture = "MixtralForCausalLM"
    mapped = tuple(f for f in Mistral.mapped if f not in ("attention_bias", "mlp_bias")) + (
        "num_local_experts", "num_experts", "num_experts_per_tok")
    ignored = Llama.ignored | MOE_IGNORED | {
        "router_jitter_noise": "multiplies a layer's input by random noise while training only"}
    router = "block_sparse_moe"
    parts = {"w_1": "w1", "w_3": "w3", "w_2": "w2"}
    expert_counts = ("num_local_experts", "num_experts")
    renormalises = True
    defaults = {"intermediate_size": 14336, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5, "rope_theta": 1e6, "bos_token_id": 1, "eos_token_id": 2,
                "num_local_experts": 8, "num_experts_per_tok": 2}

    def _biases(self, c: dict, where: str) -> dict:
        return dict.fromkeys(("q", "k", "v", "o", "ffn"), False)

    def config(self, spec) -> dict:
        return {k: v for k, v in super().config(spec).items() if k not in ("attention_bias", "mlp_bias")}
