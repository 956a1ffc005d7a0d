"""Qwen2-MoE (``model_type: qwen2_moe``): transformers' Qwen2MoeForCausalLM and Qwen2MoeModel as
tfspec specs (Qwen/Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B and their -Chat/-Instruct models).

Qwen2 (``llama.py``: pre-RMSNorm, grouped-query attention, rotary positions, a sliding window
refused by name) whose feed-forward layers are mixtures of experts (``mixtral.py``'s
``Experts``) where ``SparseSteps`` says: layer i unless it is listed in ``mlp_only_layers`` or
i + 1 is not a multiple of ``decoder_sparse_step``; the others keep a dense SwiGLU MLP
``intermediate_size`` wide, and the stack is then groups of both. A sparse layer's
``num_experts`` experts are ``moe_intermediate_size`` wide; each token runs the
``num_experts_per_tok`` best, weighted by the router's probabilities (renormalised only with
``norm_topk_prob``), plus one shared expert ``shared_expert_intermediate_size`` wide on every
token, its output scaled by sigmoid(x w) (``shared_expert_gate``: the moe layer's ``shared: 1,
shared_gate: true``). ``qkv_bias`` (true unless said) biases q, k and v. Defaults are
Qwen2MoeConfig's (Qwen1.5-MoE-A2.7B's shape: 60 experts, top 4).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import _show, flag, number, register
from tfspec.interop.hf.llama import Llama, Qwen2
from tfspec.interop.hf.mixtral import MOE_IGNORED, Experts, first_moe

MOE_FIELDS = ("num_experts_per_tok", "norm_topk_prob", "moe_intermediate_size", "decoder_sparse_step",
              "mlp_only_layers")
"""What Qwen2-MoE and Qwen3-MoE configurations say about their experts (besides their number)."""


class SparseSteps(Experts):
    """Qwen's mixture-of-experts layout (Qwen2-MoE, Qwen3-MoE): experts ``moe_intermediate_size``
    wide in the layers ``decoder_sparse_step`` and ``mlp_only_layers`` leave sparse."""

    grouped = True

    def _sparse(self, c: dict, where: str, layers: int) -> list[bool]:
        """Layer i is sparse unless listed in mlp_only_layers or i + 1 is not a multiple of
        decoder_sparse_step, as transformers' decoder layer decides."""
        step, dense = number(c, "decoder_sparse_step", where, default=1), c.get("mlp_only_layers") or []
        if step < 1:
            raise TfspecError(f"{where}: decoder_sparse_step must be a positive integer, got {step}")
        if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
            raise TfspecError(f"{where}: mlp_only_layers: {_show(dense)} is not supported; tfspec reads a list of "
                              "layer indices")
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]

    def _moe(self, c: dict, where: str) -> dict:
        return super()._moe(c, where) | {"d_ff": number(c, "moe_intermediate_size", where)}

    def config(self, spec) -> dict:
        """The experts' width and which layers are dense (mlp_only_layers, decoder_sparse_step 1)."""
        dense = [layer.index for layer in spec.plan("decoder") if not any(s.kind == "moe" for s in layer.sublayers)]
        return super().config(spec) | {"intermediate_size": spec.d_ff, "moe_intermediate_size": first_moe(spec).d_ff,
                                       "decoder_sparse_step": 1, "mlp_only_layers": dense}


@register
class Qwen2Moe(SparseSteps, Qwen2):
    model_type = "qwen2_moe"
    title = "Qwen2-MoE"
    architectures = {"Qwen2MoeForCausalLM": "model.", "Qwen2MoeModel": ""}
    export_architecture = "Qwen2MoeForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f not in ("attention_bias", "mlp_bias")) + MOE_FIELDS + (
        "num_experts", "shared_expert_intermediate_size", "qkv_bias")
    ignored = Qwen2.ignored | MOE_IGNORED
    defaults = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                "num_attention_heads": 16, "num_key_value_heads": 16, "max_position_embeddings": 32768,
                "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                "shared_expert_intermediate_size": 5632}

    def _biases(self, c: dict, where: str) -> dict:
        qkv = flag(c, "qkv_bias", where, True)
        return {"q": qkv, "k": qkv, "v": qkv, "o": False, "ffn": False}

    def _moe(self, c: dict, where: str) -> dict:
        return super()._moe(c, where) | {"shared": 1, "shared_gate": True,
                                         "shared_d_ff": number(c, "shared_expert_intermediate_size", where)}

    def structure(self, spec) -> str | None:
        """Besides ``Experts``' check, the shared expert and its gate, which the configuration cannot leave out."""
        if reason := super().structure(spec):
            return reason
        moe = first_moe(spec)
        if moe.shared != 1 or not moe.shared_gate:
            return f"{self.title}'s expert layers have one shared expert with a sigmoid gate (shared: 1, shared_gate)"
        return None

    def config(self, spec) -> dict:
        return super().config(spec) | {"shared_expert_intermediate_size": first_moe(spec).shared_d_ff,
                                       "qkv_bias": spec.has_bias("q")}
